// `weft run`: the main job. The bench engine over all four collectives (or those named)
// with run's defaults (8 B to 64 MiB, factor 8, float sum, 5 timed iterations), every
// element checked.
#include <cstdio>

#include "tools/bench.hpp"
#include "tools/bench_flags.hpp"
#include "tools/commands.hpp"
#include "tools/job.hpp"

namespace weft::tools {
namespace {

constexpr const char* kUsage =
    "usage: mpirun -np N weft run [collective ...] [options]\n"
    "\n"
    "Runs allreduce, allgather, reduce_scatter and broadcast (or the collectives named, as\n"
    "words such as allreduce or allreduce,broadcast) over a size sweep, checks every element\n"
    "exactly on every rank, and prints nccl-tests' table (see weft bench --help for the\n"
    "columns), each link's counters and \"# all results exact\" when nothing was wrong.\n"
    "Exits 1 if any element is wrong or a call fails, 2 on bad usage.\n"
    "\n"
    "  -b, --minbytes BYTES     smallest size (default 8; K, M, G suffixes)\n"
    "  -e, --maxbytes BYTES     largest size (default 64M)\n"
    "  -f, --stepfactor F       size multiplier between steps (default 8)\n"
    "  -n, --iters N            timed iterations per size (default 5)\n"
    "  -w, --warmup_iters N     warm-up iterations per size (default 1)\n"
    "  -c, --check N            checked iterations per size, each on fresh inputs, as in\n"
    "                           nccl-tests and weft bench (default 1; 0: no check, #wrong\n"
    "                           prints N/A)\n"
    "  -d, --datatype TYPE      int8 uint8 int32 uint32 int64 uint64 half float double\n"
    "                           bfloat16, a comma-separated list, or all (default float)\n"
    "  -o, --op OP              sum prod max min avg, a list, or all (default sum)\n"
    "  -N, --run_cycles N       run the whole sweep N times, each after a \"# cycle K\" line\n"
    "                           (default 1; 0: until SIGINT, SIGTERM or SIGUSR1, which end\n"
    "                           it after the row under way, with the footer; under mpirun,\n"
    "                           which kills the ranks a second after it passes on SIGINT or\n"
    "                           SIGTERM, send mpirun SIGUSR1). A failed call ends the run\n"
    "      --collectives LIST   the collectives, as the words above (default all four)\n"
    "  -h, --help               this text\n";

const Flag kFlags[] = {
    {"-b", "--minbytes", set_min_bytes},   {"-e", "--maxbytes", set_max_bytes},
    {"-f", "--stepfactor", set_factor},    {"-n", "--iters", set_iters},
    {"-w", "--warmup_iters", set_warmup},  {"-c", "--check", set_check},
    {"-d", "--datatype", set_types},       {"-o", "--op", set_ops},
    {"-N", "--run_cycles", set_cycles},
    {nullptr, "--collectives", add_collectives},
    {"-g", "--ngpus", set_gpus},               {"-t", "--nthreads", set_threads},
    {"-m", "--agg_iters", set_agg_iters},      {"-a", "--average", set_average},
    {"-p", "--parallel_init", set_no_effect},  {"-z", "--blocking", set_no_effect},
};

}  // namespace

int run_command(int argc, char** argv) {
  BenchOptions o;
  o.command = "run";
  o.collectives.clear();  // the named ones, else all four
  o.min_bytes = 8;
  o.max_bytes = size_t{64} << 20;
  o.factor = 8;
  o.iters = 5;
  o.warmup = 1;
  o.check = 1;
  bool help = false;
  if (int rc = parse_flags(argc, argv, kFlags, std::size(kFlags), add_collectives, o, &help);
      rc != 0 || help) {
    if (help) std::printf("%s\n%s\n%s", kUsage, kFixedFlagsHelp, settings_help().c_str());
    return rc;
  }
  if (o.collectives.empty()) {
    o.collectives = {CollectiveKind::kAllreduce, CollectiveKind::kAllgather,
                     CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast};
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
  return leave_job(&*job, outcome.exit_status());
}

}  // namespace weft::tools
