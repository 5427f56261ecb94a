// Pipelined chain broadcast: the root streams the vector to the next rank of the ring, and
// every rank forwards each byte to its successor as soon as it has landed, stopping before
// the root. One pass over each link; the latency of the chain is N-1 link hops for the first
// byte, after which all links carry data at once. Bytes are only copied on the way and stay
// unchanged, so they are lent (lend_some): links may let the next rank read them straight from
// our buffer. The root lends its send buffer as the caller's input (lend_input), and fills its
// own receive buffer while the links wait, off the critical path.
#include <cstring>

#include "collectives/algorithm.hpp"
#include "collectives/ring_layout.hpp"
#include "collectives/stream.hpp"
#include "src/base/copy.hpp"

namespace weft {

absl::Status broadcast_chain(const AlgoContext& ctx, const CollectiveArgs& args) {
  const size_t bytes = args.count * args.elem_bytes();
  const bool is_root = ctx.rank == args.root;
  IdleCopy root_copy;
  if (is_root) root_copy = IdleCopy(args.recv, args.send, bytes, bytes);
  const int n = ctx.size;
  if (n == 1) {
    root_copy.finish();
    return absl::OkStatus();
  }
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  const int hops_from_root = ring_mod(p - ring.position_of(args.root), n);

  transport::Pair* prev = nullptr;
  transport::Pair* next = nullptr;
  if (!is_root) {
    auto link = ctx.links->link(ring.rank_at(p - 1), args.deadline);
    if (!link.ok()) return link.status();
    prev = *link;
  }
  if (hops_from_root < n - 1) {
    auto link = ctx.links->link(ring.rank_at(p + 1), args.deadline);
    if (!link.ok()) return link.status();
    next = *link;
  }

  Landing landing = Landing::copy(args.recv, is_root ? 0 : bytes);
  const std::byte* source = is_root ? args.send : args.recv;
  size_t sent = 0;
  const size_t to_send = next != nullptr ? bytes : 0;
  Waiter waiter("broadcast (chain)", args.deadline);
  while (sent < to_send || !landing.done()) {
    bool moved = false;
    if (prev != nullptr && !landing.done()) {
      auto got = receive_into(*prev, landing);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
    }
    const size_t ready = is_root ? bytes : landing.landed();
    if (sent < std::min(ready, to_send)) {
      auto n_sent = is_root ? next->lend_input(source + sent, ready - sent)
                            : next->lend_some(source + sent, ready - sent);
      if (!n_sent.ok()) return n_sent.status();
      sent += *n_sent;
      moved |= *n_sent > 0;
    }
    if (!moved) moved = root_copy.step();
    if (absl::Status s = waiter.after_pass(moved, prev, next); !s.ok()) return s;
  }
  root_copy.finish();
  return absl::OkStatus();
}

}  // namespace weft
