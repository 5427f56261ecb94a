// How the weft command joins a job: through MPI when it was built with MPI and launched by
// mpirun, otherwise from the launcher environment (WEFT_RANK/WEFT_SIZE/WEFT_COORDINATOR).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weft/weft.hpp"

namespace weft::tools {

/// A joined job: the communicator, how long creating it took on this rank (MPI_Init not
/// included), and whether MPI was initialised (so MPI_COMM_WORLD may be used).
struct Job {
  std::unique_ptr<Communicator> comm;
  absl::Duration create_time;
  bool mpi = false;
};

/// Joins the job; call leave_job() before exiting (after the communicator is gone).
absl::StatusOr<Job> join_job(int* argc, char*** argv);
void leave_job();

/// Every rank's `value` summed across the job (for totals such as wrong-element counts).
uint64_t sum_over_ranks(Communicator& comm, uint64_t value);

}  // namespace weft::tools
