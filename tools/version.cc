// `weft version` / `weft --version`: the version and what this binary was built with, for a
// bug report or to tell two installs apart. Only facts known without a job.
#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/reduce.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

#ifdef WEFT_HAVE_MPI
#include <mpi.h>
#endif

namespace weft::tools {
namespace {

// Which MPI library, e.g. "Open MPI v4.1.4": MPI_Get_library_version may be called before
// MPI_Init (MPI 3.0), and its text runs on with package and build details after a comma.
std::string mpi_library() {
#ifdef WEFT_HAVE_MPI
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string name(text, static_cast<size_t>(length));
  name = name.substr(0, name.find_first_of(",\n"));
  return name.empty() ? "unknown" : name;
#else
  return "";
#endif
}

}  // namespace

int version_command(int argc, char** argv) {
  CLI::App app("", "weft version");
  if (auto rc = parse_args(app, argc, argv,
                           "usage: weft version (or weft --version)\n\nPrints weft's version, "
                           "whether MPI support is built in, the compiler and the reduction "
                           "kernels.\n")) {
    return *rc;
  }
  std::printf("weft %s\n", WEFT_VERSION);
#ifdef WEFT_HAVE_MPI
  std::printf("mpi: built in (%s): mpirun launches, --compare mpi\n", mpi_library().c_str());
#else
  std::printf("mpi: not built in (launch with WEFT_RANK/WEFT_SIZE/WEFT_COORDINATOR; for mpirun "
              "and --compare mpi, run scripts/setup and rebuild)\n");
#endif
#if defined(__clang__)
  std::printf("compiler: clang %s\n", __clang_version__);
#elif defined(__GNUC__)
  std::printf("compiler: g++ %s\n", __VERSION__);
#endif
  std::printf("reduction kernels: %s\n", reduce_isa());
  return 0;
}

}  // namespace weft::tools
