// The weft command's own bookkeeping across ranks: sums and maxima of what each rank
// measured, and whether every rank may go on. Unlike the calls a command measures, these
// must work whatever the environment forces (WEFT_ALGORITHM=allreduce=push on four ranks
// fails every allreduce it chooses), and when they fail all the same (the communicator
// failed) the caller gets the library's message to print, never a silent sentinel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/weft.hpp"

namespace weft::tools {

/// values[0..n) summed over the ranks, in place.
absl::Status sum_in_place(Communicator& comm, uint64_t* values, size_t n);
/// values[0..n) reduced to their maxima over the ranks, in place.
absl::Status max_in_place(Communicator& comm, double* values, size_t n);

absl::StatusOr<uint64_t> total_over_ranks(Communicator& comm, uint64_t value);
absl::StatusOr<double> max_over_ranks(Communicator& comm, double value);

}  // namespace weft::tools
