// Command-line flags of `weft bench` and `weft run`, table-driven so both commands share
// every value parser and differ only in which flags they take.
#pragma once

#include <cstddef>

#include "tools/bench.hpp"

namespace weft::tools {

/// One flag: "-b" and/or "--minbytes"; `set` parses the value into the options (false:
/// a bad value). A flag with no `set` takes no value and sets `*toggle`.
struct Flag {
  const char* short_name;
  const char* long_name;
  bool (*set)(const char* value, BenchOptions& options);
  bool BenchOptions::*toggle = nullptr;
};

/// The value parsers, shared by the tables. Lists take names separated by commas, or "all".
bool set_min_bytes(const char* v, BenchOptions& o);
bool set_max_bytes(const char* v, BenchOptions& o);
bool set_factor(const char* v, BenchOptions& o);
bool set_increment(const char* v, BenchOptions& o);
bool set_iters(const char* v, BenchOptions& o);
bool set_warmup(const char* v, BenchOptions& o);
bool set_check(const char* v, BenchOptions& o);
bool set_root(const char* v, BenchOptions& o);
bool set_types(const char* v, BenchOptions& o);
bool set_ops(const char* v, BenchOptions& o);
bool set_collectives(const char* v, BenchOptions& o);
bool set_json(const char* v, BenchOptions& o);
bool set_compare(const char* v, BenchOptions& o);

/// Parses argv[1..argc) against `flags`. A word that is not a flag goes to `positional`
/// (an error when it is null). Returns 0, or 2 after printing why to stderr; sets *help
/// on -h / --help.
int parse_flags(int argc, char** argv, const Flag* flags, size_t nflags,
                bool (*positional)(const char*, BenchOptions&), BenchOptions& o, bool* help);

}  // namespace weft::tools
