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
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"

namespace weft {

absl::Status allgather_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args) {
  if (ctx.agreement == nullptr) {
    return absl::InternalError("allgather (recursive doubling) run without its call check");
  }
  const int n = ctx.size;  // a power of two: choose_algorithm refuses other counts
  const size_t block = args.count * args.elem_bytes();
  IdleCopy place_own(args.recv + static_cast<size_t>(ctx.rank) * block, args.send, block);
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
    int out = 0, in = 0;  // blocks of the group fully sent / received
    size_t sent = 0;
    Landing landing = Landing::copy(block_of(theirs), block);
    AgreementRound round(*ctx.agreement, n);
    const size_t group = static_cast<size_t>(d) * block;
    if (block > 0 && group <= AgreementRound::kCarryBytes) {
      round.expect_carried(group);
      if (round.data_follows()) {
        for (int i = 0; i < d; ++i) round.carry(d == 1 ? args.send : block_of(mine + i), block);
        out = d;
      }
    }
    while (!round.sent() || !round.merged() || (round.data_follows() && (out < d || in < d))) {
      bool moved = false;
      if (!round.sent()) {
        auto k = round.send(**pair, block > 0 && out < d);
        if (!k.ok()) return k.status();
        moved |= *k > 0;
      }
      if (round.sent() && out < d && round.data_follows()) {
        const std::byte* from = d == 1 ? args.send : block_of(mine + out);
        auto k = (*pair)->offer_some(from + sent, block - sent);
        if (!k.ok()) return round.unless_calls_differ(**pair, k.status());
        sent += *k;
        moved |= *k > 0;
        if (sent == block) out++, sent = 0;
      }
      // Ours leaves before we look for theirs: looking costs a cross-core cache miss (~0.1 us).
      if (!round.merged()) {
        auto k = round.receive(**pair);
        if (!k.ok()) return k.status();
        moved |= *k > 0;
      }
      if (round.merged() && in < d && round.data_follows()) {
        auto got = round.receive_data(**pair, landing);
        if (!got.ok()) return got.status();
        moved |= *got > 0;
        if (landing.done() && ++in < d) landing = Landing::copy(block_of(theirs + in), block);
      }
      if (!moved) moved = place_own.step();
      if (absl::Status s = waiter.after_pass(moved, *pair); !s.ok()) return s;
    }
    place_own.finish();
  }
  if (n == 1) place_own.finish();
  return absl::OkStatus();
}

}  // namespace weft
