#include "tools/bench_flags.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "tools/sweep.hpp"

namespace weft::tools {
namespace {

bool parse_int(const char* v, int min, int* out) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min) return false;
  *out = n;
  return true;
}

// "a,b,c" or "all" into `out`, each name through `parse`; `all` lists every value.
template <typename T, typename Parse>
bool parse_list(const char* v, Parse parse, const std::vector<T>& all, std::vector<T>* out) {
  const std::string list = v;
  if (list == "all") {
    *out = all;
    return true;
  }
  std::vector<T> values;
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::optional<T> value = parse(list.substr(start, end - start));
    if (!value || std::find(all.begin(), all.end(), *value) == all.end()) return false;
    values.push_back(*value);
    start = end + 1;
  }
  *out = values;
  return true;
}

}  // namespace

bool set_min_bytes(const char* v, BenchOptions& o) { return parse_bytes(v, &o.min_bytes); }
bool set_max_bytes(const char* v, BenchOptions& o) { return parse_bytes(v, &o.max_bytes); }
bool set_factor(const char* v, BenchOptions& o) { return parse_bytes(v, &o.factor) && o.factor >= 1; }
bool set_increment(const char* v, BenchOptions& o) {
  // nccl-tests: the factor wins when both are given; -i alone means additive steps.
  return parse_bytes(v, &o.increment) && o.increment >= 1;
}
bool set_iters(const char* v, BenchOptions& o) { return parse_int(v, 1, &o.iters); }
bool set_warmup(const char* v, BenchOptions& o) { return parse_int(v, 0, &o.warmup); }
bool set_check(const char* v, BenchOptions& o) { return parse_int(v, 0, &o.check); }
bool set_root(const char* v, BenchOptions& o) { return parse_int(v, 0, &o.root); }
bool set_json(const char* v, BenchOptions& o) {
  o.json_path = v;
  return !o.json_path.empty();
}
bool set_compare(const char* v, BenchOptions& o) {
  o.compare_mpi = std::strcmp(v, "mpi") == 0;
  return o.compare_mpi;
}

bool set_types(const char* v, BenchOptions& o) {
  std::vector<DataType> all;
  for (int t = 0; t < kNumDataTypes; ++t) all.push_back(static_cast<DataType>(t));
  return parse_list<DataType>(v, [](const std::string& s) { return parse_data_type(s); }, all, &o.types);
}

bool set_ops(const char* v, BenchOptions& o) {
  std::vector<ReduceOp> all;
  for (int op = 0; op < kNumReduceOps; ++op) all.push_back(static_cast<ReduceOp>(op));
  return parse_list<ReduceOp>(v, [](const std::string& s) { return parse_reduce_op(s); }, all, &o.ops);
}

bool set_collectives(const char* v, BenchOptions& o) {
  const std::vector<CollectiveKind> all = {CollectiveKind::kAllreduce, CollectiveKind::kAllgather,
                                           CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast};
  return parse_list<CollectiveKind>(v, [](const std::string& s) { return parse_collective(s); },
                                    all, &o.collectives);
}

int parse_flags(int argc, char** argv, const Flag* flags, size_t nflags,
                bool (*positional)(const char*, BenchOptions&), BenchOptions& o, bool* help) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      *help = true;
      return 0;
    }
    const Flag* flag = nullptr;
    for (size_t f = 0; f < nflags && flag == nullptr; ++f) {
      const Flag& c = flags[f];
      if ((c.short_name && !std::strcmp(a, c.short_name)) || (c.long_name && !std::strcmp(a, c.long_name))) {
        flag = &c;
      }
    }
    if (flag == nullptr && a[0] != '-' && positional != nullptr) {
      if (positional(a, o)) continue;
      std::fprintf(stderr, "weft %s: unknown collective '%s' (try --help)\n", o.command, a);
      return 2;
    }
    if (flag == nullptr) {
      std::fprintf(stderr, "weft %s: unknown option '%s' (try --help)\n", o.command, a);
      return 2;
    }
    if (flag->set == nullptr) {
      o.*(flag->toggle) = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "weft %s: option %s needs a value (try --help)\n", o.command, a);
      return 2;
    }
    const char* v = argv[++i];
    if (!flag->set(v, o)) {
      std::fprintf(stderr, "weft %s: bad value '%s' for %s (try --help)\n", o.command, v, a);
      return 2;
    }
  }
  if (o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "weft %s: -b %zu is above -e %zu\n", o.command, o.min_bytes, o.max_bytes);
    return 2;
  }
  if (o.min_bytes == 0 && o.factor > 1) {
    std::fprintf(stderr, "weft %s: -b 0 with -f never grows; use -b 1 or more, or -i\n", o.command);
    return 2;
  }
  return 0;
}

}  // namespace weft::tools
