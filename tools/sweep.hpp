// What `weft bench` and `weft run` share: the sizes of a sweep, the buffers, where each
// collective's input and result lie (nccl-tests' layout, in-place included), exact inputs
// and the count of wrong elements, and nccl-tests' bus bandwidth factor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/collective.hpp"  // reduces(), counts_per_rank()
#include "weft/types.hpp"

namespace weft::tools {

/// One collective call as the bench makes it.
struct Call {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  ///< read by allreduce and reduce_scatter only
  int root = 0;                  ///< read by broadcast only
  /// The count argument: per rank for allgather (sent) and reduce_scatter (received).
  size_t count = 0;
  bool in_place = false;
};

/// The count argument for a size in bytes, as nccl-tests derives it: bytes / element size,
/// divided by the rank count for allgather and reduce_scatter, rounded down; except that a
/// size above 0 too small for one element (per rank) is raised to one (see sweep.cc).
size_t count_for(CollectiveKind kind, size_t bytes, DataType type, int nranks);
/// Whether count_for raises `bytes`: above 0, but less than one element (per rank).
bool below_one_element(CollectiveKind kind, size_t bytes, DataType type, int nranks);
/// count_for of each size, each count once: sizes that round (or are raised) to the same
/// count would repeat the same row.
std::vector<size_t> sweep_counts(CollectiveKind kind, const std::vector<size_t>& sizes,
                                 DataType type, int nranks);
/// Bytes of the whole vector a call moves (the size column): count * element (* nranks).
size_t bytes_of(const Call& call, int nranks);

/// nccl-tests' bus bandwidth factor: 2(n-1)/n for allreduce, (n-1)/n for allgather and
/// reduce_scatter, 1 for broadcast.
double bus_factor(CollectiveKind kind, int nranks);

/// Parses "64", "8K", "256M", "1G" (powers of 1024). False on anything else.
bool parse_bytes(const char* text, size_t* out);

/// The sizes from min to max: times `factor` when it is above 1, else plus `increment`.
std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, size_t factor,
                                size_t increment);

/// A send and a receive buffer of `bytes` each, page-aligned, allocated and written once
/// so that no page fault is ever timed.
class Buffers {
 public:
  static absl::StatusOr<Buffers> allocate(size_t bytes);
  std::byte* send() { return send_.get(); }
  std::byte* recv() { return recv_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, Free> send_, recv_;
  size_t bytes_ = 0;
};

/// Where a call reads and writes, in nccl-tests' layout. Out of place: input in send,
/// result in recv. In place: allreduce and broadcast use recv for both; allgather's input
/// is this rank's slot of recv; reduce_scatter's input is the whole of recv and its result
/// this rank's slot of it. `send` is always where this rank's input lies.
struct Placement {
  std::byte* send;
  std::byte* recv;
};
Placement place(const Call& call, Buffers& buffers, int rank);

/// Before a checked call: overwrites the whole result area with a value no correct result
/// holds (so a call that writes nothing is caught), then writes this rank's exact inputs.
void prepare(const Call& call, const Placement& at, int rank, int nranks);

/// Elements of the result at `result` (this rank's part of it) that differ from the
/// exact expected values.
uint64_t count_wrong(const Call& call, const std::byte* result, int rank, int nranks);

/// Elements in this rank's result (count, or count * nranks for allgather).
size_t result_elements(const Call& call, int nranks);

}  // namespace weft::tools
