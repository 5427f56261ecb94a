// How the weft command joins a job: through MPI when it was built with MPI and launched by
// mpirun, otherwise from the launcher environment (WEFT_RANK/WEFT_SIZE/WEFT_COORDINATOR).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "weft/weft.hpp"

namespace weft::tools {

/// Joins the job; call leave_job() before exiting.
absl::StatusOr<std::unique_ptr<Communicator>> join_job(int* argc, char*** argv);
void leave_job();

/// Every rank's `value` summed across the job (for totals such as wrong-element counts).
uint64_t sum_over_ranks(Communicator& comm, uint64_t value);

}  // namespace weft::tools
