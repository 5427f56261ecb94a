// The two ring passes that ring allreduce, reduce_scatter and allgather are built from.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "collectives/collective.hpp"
#include "collectives/ring_layout.hpp"

namespace weft {

/// Ring reduce-scatter: `in` holds every rank's segments (`segs`, indexed by rank); on return
/// `out` holds the reduction of segment `ctx.rank` over all ranks (divided for kAvg). `out`
/// may be exactly `in`'s own segment (in-place).
absl::Status ring_reduce_scatter(const AlgoContext& ctx, const std::byte* in, std::byte* out,
                                 const Segments& segs, DataType type, ReduceOp op,
                                 Deadline deadline, const char* what);

/// Ring allgather: this rank's data is at `own`, or already in `buf`'s segment `ctx.rank`
/// when `own` is null; on return every segment of `buf` holds its owner's data.
absl::Status ring_allgather(const AlgoContext& ctx, std::byte* buf, const Segments& segs,
                            size_t elem_bytes, Deadline deadline, const char* what,
                            const std::byte* own = nullptr);

}  // namespace weft
