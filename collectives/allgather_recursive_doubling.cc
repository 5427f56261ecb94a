// Recursive-doubling allgather, for small messages on a power-of-two number of ranks:
// log2(N) exchanges instead of the ring's N-1 steps, which matters most when ranks share
// cores and every step costs a context switch.
//
// At the exchange with distance d (1, 2, 4, ...), ring position p trades with position
// p XOR d: it sends the d blocks it holds (those of the aligned group of d positions that
// contains p) and receives the partner's d blocks, so the blocks it holds double each time.
// Blocks sit in the output by rank, and ring positions need not follow rank order, so a
// group is sent and received block by block, in position order on both sides.
//
// The first exchange sends this rank's block straight from the caller's send buffer and
// copies it into the output while waiting for the partner; later exchanges send it from there.
// Each exchange starts with the call check's state, in band (collectives/call_check.hpp);
// a group of blocks small enough rides in the state's own write.

#include "collectives/algorithm.hpp"
#include "collectives/block_trade.hpp"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"

namespace weft {

absl::Status allgather_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args) {
  if (ctx.agreement == nullptr) {
    return absl::InternalError("allgather (recursive doubling) run without its call check");
  }
  const int n = ctx.size;  // a power of two: choose_algorithm refuses other counts
  const size_t block = args.count * args.elem_bytes();
  IdleCopy place_own(args.recv + static_cast<size_t>(ctx.rank) * block, args.send, block,
                     block * static_cast<size_t>(n));
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  auto block_of = [&](int position) {
    return args.recv + static_cast<size_t>(ring.rank_at(position)) * block;
  };
  Waiter waiter("allgather (recursive doubling)", args.deadline);
  for (int d = 1; d < n; d *= 2) {
    auto pair = ctx.links->link(ring.rank_at(p ^ d), args.deadline);
    if (!pair.ok()) return pair.status();
    const int mine = p & ~(d - 1), theirs = (p ^ d) & ~(d - 1);
    auto ours = [&](size_t i) -> const std::byte* {
      return d == 1 ? args.send : block_of(mine + static_cast<int>(i));
    };
    auto landing = [&](size_t i) {
      return Landing::copy(block_of(theirs + static_cast<int>(i)), block);
    };
    AgreementRound round(*ctx.agreement, n);
    if (absl::Status s = trade_blocks(**pair, round, static_cast<size_t>(d), block, ours, landing,
                                      /*offer=*/true, &place_own, waiter);
        !s.ok()) {
      return s;
    }
    place_own.finish();
  }
  if (n == 1) place_own.finish();
  return absl::OkStatus();
}

}  // namespace weft
