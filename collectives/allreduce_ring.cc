// Ring allreduce = ring reduce-scatter, then ring allgather of the reduced segments, on one
// segment layout (counts that do not divide by the rank count give the first segments one
// element more). Bandwidth-optimal: each rank sends and receives 2(N-1)/N of the vector.
#include "collectives/algorithm.hpp"
#include "collectives/ring.hpp"

namespace weft {

absl::Status allreduce_ring(const AlgoContext& ctx, const CollectiveArgs& args) {
  const Segments segs = Segments::split(args.count, ctx.size);
  const size_t elem = args.elem_bytes();
  std::byte* own = args.recv + segs.offset(ctx.rank) * elem;
  if (absl::Status s = ring_reduce_scatter(ctx, args.send, own, segs, args.type, args.op,
                                           args.deadline, "allreduce (ring reduce-scatter)");
      !s.ok()) {
    return s;
  }
  return ring_allgather(ctx, args.recv, segs, elem, args.deadline, "allreduce (ring allgather)");
}

}  // namespace weft
