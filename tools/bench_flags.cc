#include "tools/bench_flags.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/base/env.hpp"
#include "tools/cli.hpp"
#include "tools/sweep.hpp"

namespace weft::tools {
namespace {

constexpr const char* kBytes = "a size in bytes such as 64, 8K, 256M or 1G (powers of 1024)";
constexpr const char* kList = ", a comma-separated list, or all";

absl::Status accepts(const std::string& what) { return absl::InvalidArgumentError(what); }

absl::Status parse_int(const char* v, int min, int* out) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min) {
    return accepts(absl::StrCat("a whole number, ", min, " or more"));
  }
  *out = n;
  return absl::OkStatus();
}

// "a,b,c" or "all" into `out`, each name through `parse`; `all` lists every value, and is
// what a bad name is told it may choose from.
template <typename T, typename Parse>
absl::Status parse_list(const char* v, Parse parse, const std::vector<T>& all, std::vector<T>* out) {
  const std::string list = v;
  if (list == "all") {
    *out = all;
    return absl::OkStatus();
  }
  std::vector<T> values;
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::optional<T> value = parse(list.substr(start, end - start));
    if (!value || std::find(all.begin(), all.end(), *value) == all.end()) {
      std::vector<const char*> names;
      for (const T& a : all) names.push_back(name_of(a));
      return accepts(absl::StrCat(absl::StrJoin(names, " "), kList));
    }
    values.push_back(*value);
    start = end + 1;
  }
  *out = values;
  return absl::OkStatus();
}

bool has_flag(const Flag* flags, size_t nflags, const char* name) {
  for (size_t f = 0; f < nflags; ++f) {
    if ((flags[f].short_name && !std::strcmp(flags[f].short_name, name)) ||
        (flags[f].long_name && !std::strcmp(flags[f].long_name, name))) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::Status set_min_bytes(const char* v, BenchOptions& o) {
  return parse_bytes(v, &o.min_bytes) ? absl::OkStatus() : accepts(kBytes);
}
absl::Status set_max_bytes(const char* v, BenchOptions& o) {
  return parse_bytes(v, &o.max_bytes) ? absl::OkStatus() : accepts(kBytes);
}
absl::Status set_factor(const char* v, BenchOptions& o) {
  if (parse_bytes(v, &o.factor) && o.factor >= 1) return absl::OkStatus();
  return accepts("a whole factor, 1 or more (1: add -i bytes instead)");
}
absl::Status set_increment(const char* v, BenchOptions& o) {
  // nccl-tests: the factor wins when both are given; -i alone means additive steps.
  if (parse_bytes(v, &o.increment) && o.increment >= 1) return absl::OkStatus();
  return accepts(absl::StrCat(kBytes, ", 1 or more"));
}
absl::Status set_iters(const char* v, BenchOptions& o) { return parse_int(v, 1, &o.iters); }
absl::Status set_warmup(const char* v, BenchOptions& o) { return parse_int(v, 0, &o.warmup); }
absl::Status set_check(const char* v, BenchOptions& o) { return parse_int(v, 0, &o.check); }
absl::Status set_root(const char* v, BenchOptions& o) { return parse_int(v, 0, &o.root); }
absl::Status set_cycles(const char* v, BenchOptions& o) { return parse_int(v, 0, &o.cycles); }
absl::Status set_json(const char* v, BenchOptions& o) {
  o.json_path = v;
  return o.json_path.empty() ? accepts("a file name") : absl::OkStatus();
}
absl::Status set_compare(const char* v, BenchOptions& o) {
  using Compare = BenchOptions::Compare;
  const std::pair<const char*, Compare> names[] = {
      {"mpi", Compare::kMpi}, {"health-off", Compare::kHealthOff}, {"nccl", Compare::kNccl}};
  for (const auto& [name, compare] : names) {
    if (std::strcmp(v, name) != 0) continue;
    o.compare = compare;
    return absl::OkStatus();
  }
  return accepts("mpi, health-off, nccl");
}

absl::Status set_memory(const char* v, BenchOptions& o) {
  if (std::strcmp(v, "host") != 0 && std::strcmp(v, "device") != 0) return accepts("host, device");
  o.device_memory = std::strcmp(v, "device") == 0;
  o.memory_given = true;
  return absl::OkStatus();
}

absl::Status set_types(const char* v, BenchOptions& o) {
  std::vector<DataType> all;
  for (int t = 0; t < kNumDataTypes; ++t) all.push_back(static_cast<DataType>(t));
  return parse_list<DataType>(v, [](const std::string& s) { return parse_data_type(s); }, all, &o.types);
}

absl::Status set_ops(const char* v, BenchOptions& o) {
  std::vector<ReduceOp> all;
  for (int op = 0; op < kNumReduceOps; ++op) all.push_back(static_cast<ReduceOp>(op));
  return parse_list<ReduceOp>(v, [](const std::string& s) { return parse_reduce_op(s); }, all, &o.ops);
}

absl::Status add_collectives(const char* v, BenchOptions& o) {
  const std::vector<CollectiveKind> all = {CollectiveKind::kAllreduce, CollectiveKind::kAllgather,
                                           CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast};
  std::vector<CollectiveKind> named;
  absl::Status s = parse_list<CollectiveKind>(
      v, [](const std::string& name) { return parse_collective(name); }, all, &named);
  for (CollectiveKind k : named) {
    if (std::find(o.collectives.begin(), o.collectives.end(), k) == o.collectives.end()) {
      o.collectives.push_back(k);
    }
  }
  return s;
}

// Each accepts the one value of nccl-tests' range that is what weft always does.
absl::Status set_gpus(const char* v, BenchOptions&) {
  if (!std::strcmp(v, "1")) return absl::OkStatus();
  return accepts("1; weft runs one rank per GPU (per process without GPUs): for more, launch "
                 "more ranks with mpirun -np");
}
absl::Status set_threads(const char* v, BenchOptions&) {
  if (!std::strcmp(v, "1")) return absl::OkStatus();
  return accepts("1; a weft rank is one process with one thread: for more, launch more ranks "
                 "with mpirun -np");
}
absl::Status set_agg_iters(const char* v, BenchOptions&) {
  if (!std::strcmp(v, "1")) return absl::OkStatus();
  if (!std::strcmp(v, "device") || !std::strcmp(v, "host")) {
    return accepts(absl::StrCat("1 (nccl-tests' aggregated iterations); for ", v,
                                " buffers: --memory ", v));
  }
  return accepts("1; weft makes one call at a time (it has no group calls to aggregate)");
}
absl::Status set_average(const char* v, BenchOptions&) {
  if (!std::strcmp(v, "3")) return absl::OkStatus();
  return accepts("3; weft reports the slowest rank's time (nccl-tests' -a 3), so that the "
                 "bandwidth is what the job got");
}
absl::Status set_no_effect(const char* v, BenchOptions&) {
  if (!std::strcmp(v, "0") || !std::strcmp(v, "1")) return absl::OkStatus();
  return accepts("0 or 1; neither changes anything in weft (its ranks are processes that each "
                 "create their communicator, and its calls return when done)");
}

const char kFixedFlagsHelp[] =
    "nccl-tests' flags for what weft does one way only, taken at that value so that a pasted\n"
    "nccl-tests line runs; any other value is refused with the reason:\n"
    "  -g, --ngpus 1            one GPU per rank: for more, more ranks (mpirun -np)\n"
    "  -t, --nthreads 1         one thread per rank: likewise\n"
    "  -m, --agg_iters 1        one call at a time\n"
    "  -a, --average 3          the time is the slowest rank's\n"
    "  -p, --parallel_init 0|1, -z, --blocking 0|1: no effect\n";

std::string settings_help() {
  // The names (and the timeout's default) from their declarations, so that they stay true.
  return absl::StrFormat(
      "Settings are WEFT_* environment variables (under mpirun, pass each with -x NAME=value);\n"
      "`weft info` prints every one with its default and current value. The main ones:\n"
      "  %-19s seconds any wait may take before the call fails (default %s)\n"
      "  %-19s auto, shm, tcp or ucx: force one transport for every link\n"
      "  %-19s force algorithms, e.g. allreduce=ring (weft info lists them)\n"
      "  %-19s tcp's network interfaces (rails), e.g. eth0,eth1\n"
      "  %-19s text every rank of the job shares; connections prove they know it\n",
      env::kTimeout.name, env::kTimeout.default_value, env::kTransport.name,
      env::kAlgorithm.name, env::kSocketIfname.name, env::kJobSecret.name);
}

int parse_flags(int argc, char** argv, const Flag* flags, size_t nflags,
                absl::Status (*positional)(const char*, BenchOptions&), BenchOptions& o,
                bool* help) {
  CLI::App app("", absl::StrCat("weft ", o.command));
  for (size_t f = 0; f < nflags; ++f) {
    const Flag& flag = flags[f];
    const std::string names = flag.short_name == nullptr ? flag.long_name
                              : flag.long_name == nullptr
                                  ? flag.short_name
                                  : absl::StrCat(flag.short_name, ",", flag.long_name);
    const char* shown = flag.short_name != nullptr ? flag.short_name : flag.long_name;
    if (flag.set == nullptr) {
      app.add_flag_callback(names, [&o, toggle = flag.toggle] { o.*toggle = true; });
      continue;
    }
    // Every occurrence counts, in order (the last wins; collectives add up), as in nccl-tests.
    app.add_option_function<std::vector<std::string>>(
           names,
           [&o, &flag, shown, flags, nflags](const std::vector<std::string>& values) {
             for (const std::string& v : values) {
               const absl::Status s = flag.set(v.c_str(), o);
               if (s.ok()) continue;
               // weft run's -c once took collectives; nccl-tests' -c (and bench's) is the
               // check count.
               std::string hint;
               BenchOptions named;
               if (has_flag(flags, nflags, "--collectives") && add_collectives(v.c_str(), named).ok()) {
                 hint = absl::StrCat(" (to choose collectives, name them as words or with "
                                     "--collectives ", v, ")");
               }
               throw BadValue(absl::StrCat("bad value '", v, "' for ", shown, "; accepted: ",
                                           s.message(), hint));
             }
           })
        ->type_name("VALUE")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->trigger_on_parse();
  }
  // Words are taken once the flags are known good: an unknown flag's value is not a word.
  std::vector<std::string> words;
  if (positional != nullptr) app.add_option("collective", words);
  // The caller prints the help (its usage, then the shared parts).
  if (asks_for_help(argc, argv)) {
    *help = true;
    return 0;
  }
  app.set_help_flag();
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  for (const std::string& w : words) {
    if (absl::Status s = positional(w.c_str(), o); !s.ok()) {
      std::fprintf(stderr, "weft %s: unknown collective '%s'; accepted: %s\n", o.command,
                   w.c_str(), std::string(s.message()).c_str());
      return 2;
    }
  }
  // Far above any machine's memory, and small enough that sizes times ranks cannot wrap.
  constexpr size_t kMostBytes = size_t{1} << 40;
  if (o.max_bytes > kMostBytes) {
    std::fprintf(stderr, "weft %s: -e %zu is above 1 TiB, more than a rank can allocate; lower -e\n",
                 o.command, o.max_bytes);
    return 2;
  }
  if (o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "weft %s: -b %zu is above -e %zu\n", o.command, o.min_bytes, o.max_bytes);
    return 2;
  }
  if (o.min_bytes == 0 && o.factor > 1) {
    // run has no -i (its sizes always grow by a factor): suggest it only where it exists.
    std::fprintf(stderr, "weft %s: -b 0 never grows by a factor (-f %zu); use -b 1 or more%s\n",
                 o.command, o.factor,
                 has_flag(flags, nflags, "-i") ? ", or -i BYTES without -f" : "");
    return 2;
  }
  return 0;
}

}  // namespace weft::tools
