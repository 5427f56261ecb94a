// The weft command: one binary, a subcommand per job.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "tools/commands.hpp"

namespace {

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
};
constexpr Command kCommands[] = {
    {"run", weft::tools::run_command},         {"bench", weft::tools::bench_command},
    {"info", weft::tools::info_command},       {"cleanup", weft::tools::cleanup_command},
    {"version", weft::tools::version_command}, {"diag", weft::tools::diag_command},
    {"health", weft::tools::health_command},
};

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
               "  diag   which link is bad, how bad and why: diag topo, probe, counters and\n"
               "         health on the job's ranks (mpirun -np N weft diag health)\n"
               "  health what a running job is doing about its links: states, isolated links,\n"
               "         route changes and counters from every rank's endpoint (--watch)\n"
               "  cleanup  remove shared-memory rings a crashed job left in /dev/shm\n"
               "  version  print the version and how this binary was built (also --version)\n"
               "\n"
               "`weft <command> --help` or `weft help <command>` describes a command's options.\n");
}

const Command* find(const char* name) {
  for (const Command& c : kCommands) {
    if (!std::strcmp(name, c.name)) return &c;
  }
  return nullptr;
}

int unknown(const char* name) {
  std::fprintf(stderr, "weft: unknown command '%s'\n\n", name);
  usage(stderr);
  return 2;
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
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char* first = argv[1];
  if (!std::strcmp(first, "--version")) {
    return flushed(weft::tools::version_command(argc - 1, argv + 1));
  }
  if (!std::strcmp(first, "help") && argc > 2) {
    // `weft help bench` is `weft bench --help`.
    const Command* c = find(argv[2]);
    if (c == nullptr) return unknown(argv[2]);
    char help[] = "--help";
    char* args[] = {argv[2], help, nullptr};
    return flushed(c->run(2, args));
  }
  if (!std::strcmp(first, "--help") || !std::strcmp(first, "-h") || !std::strcmp(first, "help")) {
    usage(stdout);
    return flushed(0);
  }
  const Command* c = find(first);
  return c != nullptr ? flushed(c->run(argc - 1, argv + 1)) : unknown(first);
}
