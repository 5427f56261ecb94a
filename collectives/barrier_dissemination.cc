// Dissemination barrier: in round i every rank sends a token to the rank 2^i positions ahead
// in the ring and waits for the token from 2^i positions behind. After ceil(log2 N) rounds
// every rank has heard, directly or through others, from every rank.
#include "collectives/algorithm.hpp"
#include "collectives/stream.hpp"

namespace weft {

absl::Status barrier_dissemination(const AlgoContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size;
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  Waiter waiter("barrier (dissemination)", args.deadline);
  for (int distance = 1; distance < n; distance *= 2) {
    auto to = ctx.links->link(ring.rank_at(p + distance), args.deadline);
    if (!to.ok()) return to.status();
    auto from = ctx.links->link(ring.rank_at(p - distance), args.deadline);
    if (!from.ok()) return from.status();
    const std::byte token{1};
    std::byte received{0};
    Landing landing = Landing::copy(&received, 1);
    bool sent = false;
    while (!sent || !landing.done()) {
      bool moved = false;
      if (!sent) {
        auto n_sent = (*to)->send_some(&token, 1);
        if (!n_sent.ok()) return n_sent.status();
        sent = *n_sent == 1;
        moved |= sent;
      }
      auto got = receive_into(**from, landing);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
      if (absl::Status s = waiter.after_pass(moved, *to, *from); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace weft
