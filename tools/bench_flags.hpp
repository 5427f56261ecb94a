// Command-line flags of `weft bench` and `weft run`, table-driven so both commands share
// every value parser and differ only in which flags they take.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"

#include "tools/bench.hpp"

namespace weft::tools {

/// One flag: "-b" and/or "--minbytes"; `set` parses the value into the options, or says
/// what the flag accepts. A flag with no `set` takes no value and sets `*toggle`.
struct Flag {
  const char* short_name;
  const char* long_name;
  absl::Status (*set)(const char* value, BenchOptions& options);
  bool BenchOptions::*toggle = nullptr;
};

/// The value parsers, shared by the tables. Lists take names separated by commas, or "all".
/// A bad value's error is what the flag accepts, e.g. "sum prod max min avg, a
/// comma-separated list, or all", for the message that names the flag.
absl::Status set_min_bytes(const char* v, BenchOptions& o);
absl::Status set_max_bytes(const char* v, BenchOptions& o);
absl::Status set_factor(const char* v, BenchOptions& o);
absl::Status set_increment(const char* v, BenchOptions& o);
absl::Status set_iters(const char* v, BenchOptions& o);
absl::Status set_warmup(const char* v, BenchOptions& o);
absl::Status set_check(const char* v, BenchOptions& o);
absl::Status set_root(const char* v, BenchOptions& o);
absl::Status set_cycles(const char* v, BenchOptions& o);
absl::Status set_types(const char* v, BenchOptions& o);
absl::Status set_ops(const char* v, BenchOptions& o);
/// Adds the collectives named to those already chosen (each once): a command takes them as
/// words and with --collectives, in any number.
absl::Status add_collectives(const char* v, BenchOptions& o);
absl::Status set_json(const char* v, BenchOptions& o);
absl::Status set_compare(const char* v, BenchOptions& o);
absl::Status set_memory(const char* v, BenchOptions& o);

/// nccl-tests' flags for what weft does one way only, accepted at the value that means what
/// weft does (so that a pasted nccl-tests line runs) and refused at any other with the
/// reason: -g 1 (one GPU per rank), -t 1 (one thread), -m 1 (no aggregated calls), -a 3
/// (the slowest rank's time), -p and -z 0 or 1 (no effect).
absl::Status set_gpus(const char* v, BenchOptions& o);
absl::Status set_threads(const char* v, BenchOptions& o);
absl::Status set_agg_iters(const char* v, BenchOptions& o);
absl::Status set_average(const char* v, BenchOptions& o);
absl::Status set_no_effect(const char* v, BenchOptions& o);
/// Their lines of a command's --help.
extern const char kFixedFlagsHelp[];

/// The settings part of a command's --help: that they are WEFT_* environment variables,
/// that `weft info` lists them all, and the ones a job most often needs.
std::string settings_help();

/// Parses argv[1..argc) against `flags`, each a CLI11 option whose value goes through its
/// parser in the order given. A word that is not a flag goes to `positional`
/// (an error when it is null). Returns 0, or 2 after printing why to stderr; sets *help
/// on -h / --help. Messages suggest only flags that `flags` has.
int parse_flags(int argc, char** argv, const Flag* flags, size_t nflags,
                absl::Status (*positional)(const char*, BenchOptions&), BenchOptions& o,
                bool* help);

}  // namespace weft::tools
