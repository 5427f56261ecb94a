#include "tools/tally.hpp"

namespace weft::tools {
namespace {

// Named per call, so WEFT_ALGORITHM (read only for calls that name none) cannot force
// these onto an algorithm that does not run on this rank count. Recursive doubling runs on
// any count, and a handful of numbers is what it is fastest at.
constexpr const char* kBookkeeping = "recursive_doubling";

}  // namespace

absl::Status sum_in_place(Communicator& comm, uint64_t* values, size_t n) {
  AllreduceOptions sum;
  sum.algorithm = kBookkeeping;
  return comm.allreduce(values, values, n, DataType::kUint64, sum);
}

absl::Status max_in_place(Communicator& comm, double* values, size_t n) {
  AllreduceOptions max;
  max.op = ReduceOp::kMax;
  max.algorithm = kBookkeeping;
  return comm.allreduce(values, values, n, DataType::kFloat64, max);
}

absl::StatusOr<uint64_t> total_over_ranks(Communicator& comm, uint64_t value) {
  if (absl::Status s = sum_in_place(comm, &value, 1); !s.ok()) return s;
  return value;
}

absl::StatusOr<double> max_over_ranks(Communicator& comm, double value) {
  if (absl::Status s = max_in_place(comm, &value, 1); !s.ok()) return s;
  return value;
}

}  // namespace weft::tools
