// Recursive-doubling reduce-scatter, for small messages: the whole send vector is allreduced
// by recursive doubling into the relay, and this rank keeps its block. That moves N times
// the ring's data, but in log2(N) steps instead of N-1, and the call check rides in band
// with the data instead of costing rounds of its own before it: at a few hundred bytes the
// rounds, not the bytes, are what a call costs.
#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"
#include "src/base/copy.hpp"

namespace weft {

absl::Status reduce_scatter_recursive_doubling(const AlgoContext& ctx,
                                               const CollectiveArgs& args) {
  if (ctx.agreement == nullptr) {
    return absl::InternalError("reduce_scatter (recursive doubling) run without its call check");
  }
  const size_t block = args.count * args.elem_bytes();
  const size_t whole = block * static_cast<size_t>(ctx.size);
  if (whole > ctx.relay.capacity) {
    // WEFT_SMALL_MESSAGE_BYTES above WEFT_RELAY_BYTES: the vector does not fit, so check the
    // call on its own and take the ring.
    if (absl::Status s = agree(ctx, *ctx.agreement, args.deadline); !s.ok()) return s;
    if (absl::Status s = ctx.agreement->verdict(); !s.ok()) return s;
    return reduce_scatter_ring(ctx, args);
  }
  CollectiveArgs all = args;
  all.kind = CollectiveKind::kAllreduce;
  all.recv = ctx.relay.data;
  all.count = args.count * static_cast<size_t>(ctx.size);
  if (absl::Status s = allreduce_recursive_doubling(ctx, all); !s.ok()) return s;
  copy_bytes(args.recv, ctx.relay.data + block * static_cast<size_t>(ctx.rank), block);
  return absl::OkStatus();
}

}  // namespace weft
