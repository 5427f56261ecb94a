// How the weft command joins a job: through MPI when it was built with MPI and launched by
// mpirun, otherwise from the launcher environment (WEFT_RANK/WEFT_SIZE/WEFT_COORDINATOR), and
// started by no launcher at all, as a job of one rank.
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

/// Joins the job; every path out of a command then goes through leave_job().
absl::StatusOr<Job> join_job(int* argc, char*** argv);

/// Destroys the communicator (when `job` has one) and leaves MPI; returns `exit_code`.
/// A rank whose communicator failed (or that never joined) and leaves with a nonzero code
/// aborts the MPI job rather than finalizing it: MPI_Finalize waits for every rank, and
/// after a failed call a peer may be dead or stopped, so it could wait for ever. MPI_Abort
/// makes mpirun end every rank, a stopped one too, and exit nonzero. Other failures (wrong
/// results, bad flags) finalize, so that no rank's output is cut short.
int leave_job(Job* job, int exit_code);

}  // namespace weft::tools
