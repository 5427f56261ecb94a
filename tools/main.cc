// The weft command: one binary, a subcommand per job.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/commands.hpp"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: weft <command> [options]\n"
               "\n"
               "commands:\n"
               "  run    run every collective over a size sweep on this job's ranks, check\n"
               "         every element and print a table (launch with mpirun -np N weft run)\n"
               "  bench  nccl-tests for one collective: sizes, types, ops, in and out of place,\n"
               "         time / algbw / busbw / #wrong, optionally side by side with MPI\n"
               "         (mpirun -np N weft bench allreduce -b 8 -e 256M -f 4 --compare mpi)\n"
               "  info   print the build, the transports, the algorithms and every WEFT_*\n"
               "         variable with its default and current value\n"
               "  cleanup  remove shared-memory rings a crashed job left in /dev/shm\n"
               "\n"
               "`weft <command> --help` describes a command's options.\n");
}

// What a command printed is its result: a stdout that could not take it (a full disk,
// /dev/full) fails the command rather than exiting 0 with the output lost.
int flushed(int rc) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  std::fprintf(stderr, "weft: cannot write to stdout: %s\n", std::strerror(errno));
  return rc != 0 ? rc : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "run") return flushed(weft::tools::run_command(argc - 1, argv + 1));
  if (command == "bench") return flushed(weft::tools::bench_command(argc - 1, argv + 1));
  if (command == "info") return flushed(weft::tools::info_command(argc - 1, argv + 1));
  if (command == "cleanup") return flushed(weft::tools::cleanup_command(argc - 1, argv + 1));
  std::fprintf(stderr, "weft: unknown command '%s'\n\n", command.c_str());
  usage(stderr);
  return 2;
}
