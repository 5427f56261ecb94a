// `weft bench <collective>`: nccl-tests for weft, optionally side by side with MPI or NCCL.
#include <cstdio>

#include "tools/bench.hpp"
#include "tools/bench_flags.hpp"
#include "tools/commands.hpp"
#include "tools/job.hpp"

namespace weft::tools {
namespace {

constexpr const char* kUsage =
    "usage: mpirun -np N weft bench <collective> [options]\n"
    "\n"
    "Times a collective over a size sweep the way nccl-tests does and checks every element\n"
    "of its results exactly. <collective>: allreduce, allgather, reduce_scatter, broadcast,\n"
    "a comma-separated list of them, or all; several words add up, as does --collectives\n"
    "LIST. Sizes are whole vectors: for allgather and reduce_scatter each rank sends\n"
    "(receives) size / element size / N elements.\n"
    "\n"
    "  -b, --minbytes BYTES     smallest size (default 32M; K, M, G suffixes)\n"
    "  -e, --maxbytes BYTES     largest size (default 32M)\n"
    "  -f, --stepfactor F       multiply the size by F between steps (default: off)\n"
    "  -i, --stepbytes BYTES    add BYTES between steps when there is no factor (default 1M)\n"
    "  -d, --datatype TYPE      int8 uint8 int32 uint32 int64 uint64 half float double\n"
    "                           bfloat16, a comma-separated list, or all (default float)\n"
    "  -o, --op OP              sum prod max min avg, a list, or all (default sum); read by\n"
    "                           allreduce and reduce_scatter only (the others print \"none\")\n"
    "  -n, --iters N            timed iterations per size and placement (default 20)\n"
    "  -w, --warmup_iters N     untimed iterations before them (default 5)\n"
    "  -c, --check N            extra, untimed iterations whose results are checked, each on\n"
    "                           fresh inputs (default 1; 0: no check, #wrong prints N/A)\n"
    "  -r, --root R             broadcast root (default 0)\n"
    "  -N, --run_cycles N       run the whole sweep N times, each after a \"# cycle K\" line\n"
    "                           (default 1; 0: until SIGINT, SIGTERM or SIGUSR1, which end\n"
    "                           it after the row under way, with the footer; under mpirun,\n"
    "                           which kills the ranks a second after it passes on SIGINT or\n"
    "                           SIGTERM, send mpirun SIGUSR1). A failed call ends the run\n"
    "      --collectives LIST   more collectives, as the words before (a list, or all)\n"
    "  -J, --json FILE          also write one JSON object per line per collective, size,\n"
    "                           type and op, with every column (and the peer's); rank 0\n"
    "      --compare mpi        in the same run, the same sweep through MPI_Allreduce,\n"
    "                           MPI_Allgather, MPI_Reduce_scatter_block and MPI_Bcast on\n"
    "                           MPI_COMM_WORLD; at every size the timed calls run in 5 rounds\n"
    "                           that alternate weft and MPI. Adds the peer's time, busbw and\n"
    "                           #wrong (out of place, in place) and the ratios of weft's busbw\n"
    "                           to MPI's (out of place, in place). MPI has no half, bfloat16\n"
    "                           or avg: n/a there. Needs an MPI build and mpirun\n"
    "      --compare health-off the same communicator with its health monitor paused\n"
    "                           (docs/HEALTH.md), in the same alternating rounds: what the\n"
    "                           monitor costs, side by side\n"    "      --compare nccl       NCCL (loaded from libnccl.so.2 on the loader's path) on the\n"
    "                           same device buffers and stream, in the same rounds; implies\n"
    "                           --memory device. NCCL refuses two ranks on one GPU\n"
    "      --memory device      the calls take device buffers (on GPU local rank modulo\n"
    "                           GPUs) and are ordered on a stream, as nccl-tests' are; the\n"
    "                           time runs until the stream is done. Inputs are written and\n"
    "                           results checked in host memory, copied across untimed. No\n"
    "                           GPU: WEFT_DEVICE_STAND_IN=on stands in (host memory). Default\n"
    "                           host\n"
    "      --self-test-corrupt  checks the checker: flips one result element on the last\n"
    "                           rank before each check; must exit nonzero\n"
    "  -h, --help               this text\n";

// After the options (and the flags kFixedFlagsHelp lists).
constexpr const char* kColumns =
    "Columns, as nccl-tests: size (B), count (elements per call argument), type, redop, root\n"
    "(-1 when the collective has none), then out of place and in place: time (us, the\n"
    "slowest rank's mean over the timed iterations, measured after a barrier), algbw (size /\n"
    "time, GB/s), busbw (algbw x 2(N-1)/N for allreduce, (N-1)/N for allgather and\n"
    "reduce_scatter, 1 for broadcast) and #wrong (wrong elements summed over the ranks).\n"
    "The header gives the ranks, the weft version, the reduction kernels, the communicator\n"
    "creation time and a single-core memcpy bandwidth; the footer the wrong elements\n"
    "(\"Out of bounds values\"), the mean busbw over every row and placement, each\n"
    "collective's out-of-place busbw at the largest size (the best over types and ops) as a\n"
    "fraction of that memcpy bandwidth, and the largest rank's resident memory beyond its\n"
    "two buffers. A progress line goes to stderr when stdout is a terminal.\n"
    "\n"
    "Exits 1 if any element is wrong (weft's or the peer's) or a call fails, 2 on bad usage.\n"
    "Without mpirun, set WEFT_RANK, WEFT_SIZE and WEFT_COORDINATOR on each process.\n";

const Flag kFlags[] = {
    {"-b", "--minbytes", set_min_bytes},       {"-e", "--maxbytes", set_max_bytes},
    {"-f", "--stepfactor", set_factor},        {"-i", "--stepbytes", set_increment},
    {"-d", "--datatype", set_types},           {"-o", "--op", set_ops},
    {"-n", "--iters", set_iters},              {"-w", "--warmup_iters", set_warmup},
    {"-c", "--check", set_check},              {"-r", "--root", set_root},
    {"-N", "--run_cycles", set_cycles},
    {"-J", "--json", set_json},                {nullptr, "--compare", set_compare},
    {nullptr, "--memory", set_memory},
    {nullptr, "--collectives", add_collectives},
    {"-g", "--ngpus", set_gpus},               {"-t", "--nthreads", set_threads},
    {"-m", "--agg_iters", set_agg_iters},      {"-a", "--average", set_average},
    {"-p", "--parallel_init", set_no_effect},  {"-z", "--blocking", set_no_effect},
    {nullptr, "--self-test-corrupt", nullptr, &BenchOptions::self_test_corrupt},
};

}  // namespace

int bench_command(int argc, char** argv) {
  BenchOptions o;
  o.collectives.clear();
  bool help = false;
  if (int rc = parse_flags(argc, argv, kFlags, std::size(kFlags), add_collectives, o, &help);
      rc != 0 || help) {
    if (help) {
      std::printf("%s\n%s\n%s\n%s", kUsage, kFixedFlagsHelp, settings_help().c_str(), kColumns);
    }
    return rc;
  }
  if (o.collectives.empty()) {
    std::fprintf(stderr, "weft bench: name a collective (allreduce, allgather, reduce_scatter, "
                         "broadcast or all); try --help\n");
    return 2;
  }
  // NCCL takes device buffers only (as nccl-tests), and MPI host buffers only: weft's MPI
  // peer is not ordered on a stream, and an MPI built without CUDA crashes on device memory.
  using Compare = BenchOptions::Compare;
  if (o.compare == Compare::kNccl && o.memory_given && !o.device_memory) {
    std::fprintf(stderr, "weft bench: --compare nccl takes device buffers only: drop --memory host\n");
    return 2;
  }
  if (o.compare == Compare::kNccl) o.device_memory = true;
  if (o.compare == Compare::kMpi && o.device_memory) {
    std::fprintf(stderr, "weft bench: --compare mpi takes host buffers only: drop --memory device "
                         "(for a GPU library beside weft: --compare nccl)\n");
    return 2;
  }
  // The checker is what the self test checks, so it needs at least one check.
  if (o.self_test_corrupt && o.check == 0) o.check = 1;
#ifndef WEFT_HAVE_MPI
  if (o.compare == Compare::kMpi) {
    std::fprintf(stderr, "weft bench: --compare mpi: built without MPI; run scripts/setup and rebuild\n");
    return 2;
  }
#endif
  auto job = join_job(&argc, &argv);
  if (!job.ok()) {
    std::fprintf(stderr, "weft bench: cannot join the job: %s\n", job.status().ToString().c_str());
    return leave_job(nullptr, 1);
  }
  const BenchOutcome outcome = run_bench(*job, o);
  return leave_job(&*job, outcome.exit_status());
}

}  // namespace weft::tools
