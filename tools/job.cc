#include "tools/job.hpp"

#include "src/env.hpp"

#ifdef WEFT_HAVE_MPI
#include <mpi.h>

#include "weft/mpi.hpp"
#endif

namespace weft::tools {

#ifdef WEFT_HAVE_MPI
// mpirun sets OMPI_COMM_WORLD_SIZE; a plain start (or WEFT_RANK/WEFT_SIZE) skips MPI.
static bool launched_by_mpirun() { return read_env("OMPI_COMM_WORLD_SIZE").has_value(); }
static bool g_mpi = false;
#endif

absl::StatusOr<std::unique_ptr<Communicator>> join_job(int* argc, char*** argv) {
#ifdef WEFT_HAVE_MPI
  if (launched_by_mpirun()) {
    MPI_Init(argc, argv);
    g_mpi = true;
    return create_from_mpi(MPI_COMM_WORLD);
  }
#endif
  return Communicator::create_from_env();
}

void leave_job() {
#ifdef WEFT_HAVE_MPI
  if (g_mpi) MPI_Finalize();
  g_mpi = false;
#endif
}

uint64_t sum_over_ranks(Communicator& comm, uint64_t value) {
  uint64_t total = 0;
  if (!comm.allreduce(&value, &total, 1, DataType::kUint64).ok()) return ~uint64_t{0};
  return total;
}

}  // namespace weft::tools
