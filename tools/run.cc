// `weft run`: the main job. The bench engine over all four collectives with run's defaults
// (8 B to 64 MiB, factor 8, float sum, 5 timed iterations), every element checked.
#include <cstdio>

#include "tools/bench.hpp"
#include "tools/bench_flags.hpp"
#include "tools/commands.hpp"
#include "tools/job.hpp"

namespace weft::tools {
namespace {

constexpr const char* kUsage =
    "usage: mpirun -np N weft run [options]\n"
    "\n"
    "Runs allreduce, allgather, reduce_scatter and broadcast over a size sweep, checks every\n"
    "element exactly on every rank, and prints nccl-tests' table (see weft bench --help for\n"
    "the columns), each link's counters and \"# all results exact\" when nothing was wrong.\n"
    "Exits 1 if any element is wrong or a call fails.\n"
    "\n"
    "  -b BYTES      smallest size (default 8; K, M, G suffixes)\n"
    "  -e BYTES      largest size (default 64M)\n"
    "  -f FACTOR     size multiplier between steps (default 8)\n"
    "  -n ITERS      timed iterations per size (default 5)\n"
    "  -w ITERS      warm-up iterations per size (default 1)\n"
    "  -d TYPE       float, double, half, bfloat16, int8, uint8, int32, ..., a list or all\n"
    "                (default float)\n"
    "  -o OP         sum, prod, min, max, avg, a list or all (default sum)\n"
    "  -c LIST       collectives, comma separated (default allreduce,allgather,reduce_scatter,broadcast)\n";

const Flag kFlags[] = {
    {"-b", nullptr, set_min_bytes}, {"-e", nullptr, set_max_bytes}, {"-f", nullptr, set_factor},
    {"-n", nullptr, set_iters},     {"-w", nullptr, set_warmup},    {"-d", nullptr, set_types},
    {"-o", nullptr, set_ops},       {"-c", nullptr, set_collectives},
};

}  // namespace

int run_command(int argc, char** argv) {
  BenchOptions o;
  o.command = "run";
  o.collectives = {CollectiveKind::kAllreduce, CollectiveKind::kAllgather,
                   CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast};
  o.min_bytes = 8;
  o.max_bytes = size_t{64} << 20;
  o.factor = 8;
  o.iters = 5;
  o.warmup = 1;
  o.check = 1;
  bool help = false;
  if (int rc = parse_flags(argc, argv, kFlags, std::size(kFlags), nullptr, o, &help); rc != 0 || help) {
    if (help) std::printf("%s", kUsage);
    return rc;
  }
  auto job = join_job(&argc, &argv);
  if (!job.ok()) {
    std::fprintf(stderr, "weft run: cannot join the job: %s\n", job.status().ToString().c_str());
    return leave_job(nullptr, 1);
  }
  Communicator& comm = *job->comm;
  const BenchOutcome outcome = run_bench(*job, o);
  if (comm.rank() == 0 && !outcome.failed) {
    for (const LinkStats& l : comm.link_stats()) {
      std::printf("# link 0<->%d over %s: sent %llu B, received %llu B, errors %llu\n", l.peer,
                  l.transport.c_str(), static_cast<unsigned long long>(l.bytes_sent),
                  static_cast<unsigned long long>(l.bytes_received),
                  static_cast<unsigned long long>(l.errors));
    }
    std::printf("# %s\n", outcome.ok() ? "all results exact" : "WRONG RESULTS");
  }
  return leave_job(&*job, outcome.ok() ? 0 : 1);
}

}  // namespace weft::tools
