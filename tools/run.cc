// `weft run`: the main job. Every collective over a size sweep on this job's ranks, each
// element checked against exact expected values, with nccl-tests' time / algbw / busbw.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "tools/commands.hpp"
#include "tools/expected.hpp"
#include "tools/job.hpp"

namespace weft::tools {
namespace {

struct RunOptions {
  size_t min_bytes = 8;
  size_t max_bytes = 64 << 20;
  size_t factor = 8;
  int iters = 5;
  int warmup = 1;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<CollectiveKind> collectives = {CollectiveKind::kAllreduce, CollectiveKind::kAllgather,
                                             CollectiveKind::kReduceScatter,
                                             CollectiveKind::kBroadcast};
};

constexpr const char* kUsage =
    "usage: mpirun -np N weft run [options]\n"
    "\n"
    "Runs allreduce, allgather, reduce_scatter and broadcast over a size sweep, checks every\n"
    "element exactly on every rank, and prints time, algbw and busbw (nccl-tests' formulas).\n"
    "Exits 1 if any element is wrong or a call fails.\n"
    "\n"
    "  -b BYTES      smallest size (default 8; K, M, G suffixes)\n"
    "  -e BYTES      largest size (default 64M)\n"
    "  -f FACTOR     size multiplier between steps (default 8)\n"
    "  -n ITERS      timed iterations per size (default 5)\n"
    "  -w ITERS      warm-up iterations per size (default 1)\n"
    "  -d TYPE       float, double, half, bfloat16, int8, uint8, int32, ... (default float)\n"
    "  -o OP         sum, prod, min, max, avg (default sum)\n"
    "  -c LIST       collectives, comma separated (default allreduce,allgather,reduce_scatter,broadcast)\n";

bool parse_bytes(const char* s, size_t* out) {
  std::string str(s);
  size_t mult = 1;
  if (!str.empty()) {
    switch (str.back()) {
      case 'K': case 'k': mult = size_t{1} << 10; break;
      case 'M': case 'm': mult = size_t{1} << 20; break;
      case 'G': case 'g': mult = size_t{1} << 30; break;
    }
    if (mult != 1) str.pop_back();
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(str, &v)) return false;
  *out = v * mult;
  return true;
}

// Returns 0 when parsed, else an exit code (0 is returned via *done for --help).
int parse(int argc, char** argv, RunOptions& o, bool* help) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "weft run: option %s needs a value (try --help)\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    bool ok = true;
    size_t n = 0;
    if (a == "-b") ok = parse_bytes(v, &o.min_bytes);
    else if (a == "-e") ok = parse_bytes(v, &o.max_bytes);
    else if (a == "-f") ok = parse_bytes(v, &o.factor) && o.factor >= 2;
    else if (a == "-n") ok = parse_bytes(v, &n) && n >= 1, o.iters = static_cast<int>(n);
    else if (a == "-w") ok = parse_bytes(v, &n), o.warmup = static_cast<int>(n);
    else if (a == "-d") {
      auto t = parse_data_type(v);
      ok = t.has_value();
      if (ok) o.type = *t;
    } else if (a == "-o") {
      auto op = parse_reduce_op(v);
      ok = op.has_value();
      if (ok) o.op = *op;
    } else if (a == "-c") {
      o.collectives.clear();
      std::string list = v;
      for (size_t start = 0; ok && start <= list.size();) {
        const size_t end = std::min(list.find(',', start), list.size());
        auto kind = parse_collective(list.substr(start, end - start));
        ok = kind.has_value() && *kind != CollectiveKind::kBarrier;
        if (ok) o.collectives.push_back(*kind);
        start = end + 1;
      }
    } else {
      std::fprintf(stderr, "weft run: unknown option '%s' (try --help)\n", a.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "weft run: bad value '%s' for %s (try --help)\n", v, a.c_str());
      return 2;
    }
  }
  return 0;
}

// nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md of NVIDIA/nccl-tests).
double bus_factor(CollectiveKind kind, int n) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

struct Buffers {
  std::vector<std::byte> send, recv;
};

// One call of `kind` on `count` elements (per rank for allgather / reduce_scatter).
absl::Status call(Communicator& c, CollectiveKind kind, Buffers& b, size_t count, const RunOptions& o) {
  switch (kind) {
    case CollectiveKind::kAllreduce: {
      AllreduceOptions opt;
      opt.op = o.op;
      return c.allreduce(b.send.data(), b.recv.data(), count, o.type, opt);
    }
    case CollectiveKind::kAllgather: return c.allgather(b.send.data(), b.recv.data(), count, o.type);
    case CollectiveKind::kReduceScatter: {
      ReduceScatterOptions opt;
      opt.op = o.op;
      return c.reduce_scatter(b.send.data(), b.recv.data(), count, o.type, opt);
    }
    case CollectiveKind::kBroadcast: return c.broadcast(b.send.data(), b.recv.data(), count, o.type);
    default: return c.barrier();
  }
}

void fill(Communicator& c, CollectiveKind kind, Buffers& b, size_t count, const RunOptions& o) {
  const int n = c.size(), r = c.rank();
  switch (kind) {
    case CollectiveKind::kAllgather: expected::fill(b.send.data(), count, o.type, o.op, r, r * count); break;
    case CollectiveKind::kReduceScatter: expected::fill(b.send.data(), count * n, o.type, o.op, r, 0); break;
    default: expected::fill(b.send.data(), count, o.type, o.op, r, 0);
  }
}

size_t count_wrong(Communicator& c, CollectiveKind kind, Buffers& b, size_t count, const RunOptions& o) {
  const int n = c.size(), r = c.rank();
  const size_t elem = size_of(o.type);
  switch (kind) {
    case CollectiveKind::kAllreduce: return expected::count_wrong_reduced(b.recv.data(), count, o.type, o.op, n, 0);
    case CollectiveKind::kReduceScatter: return expected::count_wrong_reduced(b.recv.data(), count, o.type, o.op, n, r * count);
    case CollectiveKind::kAllgather: {
      size_t wrong = 0;
      for (int p = 0; p < n; ++p) wrong += expected::count_wrong_copied(b.recv.data() + p * count * elem, count, o.type, o.op, p, p * count);
      return wrong;
    }
    default: return expected::count_wrong_copied(b.recv.data(), count, o.type, o.op, 0, 0);
  }
}

}  // namespace

int run_command(int argc, char** argv) {
  RunOptions o;
  bool help = false;
  if (int rc = parse(argc, argv, o, &help); rc != 0 || help) {
    if (help) std::printf("%s", kUsage);
    return rc;
  }
  auto joined = join_job(&argc, &argv);
  if (!joined.ok()) {
    std::fprintf(stderr, "weft run: cannot join the job: %s\n", joined.status().ToString().c_str());
    return 1;
  }
  Communicator& comm = **joined;
  const int n = comm.size();
  const bool root = comm.rank() == 0;
  const size_t elem = size_of(o.type);
  // Allocated and touched once: page faults would otherwise be timed.
  Buffers b;
  b.send.assign(o.max_bytes + elem, std::byte{0});
  b.recv.assign(o.max_bytes + elem, std::byte{0});
  if (root) {
    std::printf("# weft run: %d ranks (%d on this host), %s %s, %d iterations\n", n, comm.local_size(),
                name_of(o.type), name_of(o.op), o.iters);
    std::printf("# %-15s %12s %12s %12s %12s %12s %8s\n", "collective", "size(B)", "count",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  uint64_t total_wrong = 0;
  int failures = 0;
  for (CollectiveKind kind : o.collectives) {
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      const bool per_rank = kind == CollectiveKind::kAllgather || kind == CollectiveKind::kReduceScatter;
      const size_t count = bytes / elem / (per_rank ? n : 1);
      fill(comm, kind, b, count, o);
      absl::Status s;
      for (int i = 0; i < o.warmup && s.ok(); ++i) s = call(comm, kind, b, count, o);
      if (s.ok()) s = comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters && s.ok(); ++i) s = call(comm, kind, b, count, o);
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / o.iters;
      if (!s.ok()) {
        std::fprintf(stderr, "weft run: rank %d: %s of %zu bytes failed: %s\n", comm.rank(),
                     name_of(kind), bytes, s.ToString().c_str());
        ++failures;
        break;
      }
      double slowest = 0;
      if (!comm.allreduce(&us, &slowest, 1, DataType::kFloat64, [] { AllreduceOptions m; m.op = ReduceOp::kMax; return m; }()).ok()) slowest = us;
      const uint64_t wrong = sum_over_ranks(comm, count_wrong(comm, kind, b, count, o));
      total_wrong += wrong;
      const double total_bytes = static_cast<double>(count * elem * (per_rank ? n : 1));
      const double algbw = slowest > 0 ? total_bytes / slowest / 1e3 : 0;
      if (root) {
        std::printf("  %-15s %12.0f %12zu %12.2f %12.3f %12.3f %8llu\n", name_of(kind), total_bytes,
                    count, slowest, algbw, algbw * bus_factor(kind, n),
                    static_cast<unsigned long long>(wrong));
        std::fflush(stdout);
      }
    }
    if (failures) break;
  }
  if (root && failures == 0) {
    for (const LinkStats& l : comm.link_stats()) {
      std::printf("# link 0<->%d over %s: sent %llu B, received %llu B, errors %llu\n", l.peer,
                  l.transport.c_str(), static_cast<unsigned long long>(l.bytes_sent),
                  static_cast<unsigned long long>(l.bytes_received),
                  static_cast<unsigned long long>(l.errors));
    }
    std::printf("# %s\n", total_wrong == 0 ? "all results exact" : "WRONG RESULTS");
  }
  const int rc = (total_wrong != 0 || failures != 0) ? 1 : 0;
  joined->reset();
  leave_job();
  return rc;
}

}  // namespace weft::tools
