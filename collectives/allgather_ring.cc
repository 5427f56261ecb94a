// Ring allgather.
//
// Every rank starts with its own segment. In N-1 steps each rank sends a segment to the next
// rank and receives one from the previous rank; the segment received at step k is sent at
// step k+1. As in reduce-scatter, steps overlap: a received byte is forwarded as soon as it
// has landed in the output, so a large message streams around the ring in one pass. What is
// sent is final (this rank's own segment, or one that landed) and stays unchanged until the
// call returns, so it is lent (Pair::lend_some); an allgather's own segment, which this call
// has not written, as the caller's input (Pair::lend_input). Within an allreduce the own
// segment was just reduced here, still in this core's cache, and is lent as any other.
#include <cstring>

#include "collectives/algorithm.hpp"
#include "collectives/ring.hpp"
#include "collectives/stream.hpp"
#include "src/base/copy.hpp"

namespace weft {

absl::Status ring_allgather(const AlgoContext& ctx, std::byte* buf, const Segments& segs,
                            size_t elem, Deadline deadline, const char* what,
                            const std::byte* own) {
  const int n = ctx.size;
  // This rank's data is sent straight from where the caller has it and copied into place
  // while the links wait: the copy is off the ring's critical path, and the peer reads memory
  // nobody has just written (with single copy, it reads it from our process).
  IdleCopy place_own;
  if (own != nullptr) {
    place_own = IdleCopy(buf + segs.offset(ctx.rank) * elem, own, segs.length(ctx.rank) * elem,
                         segs.offset(n) * elem);
  }
  if (n == 1) {
    place_own.finish();
    return absl::OkStatus();
  }
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  auto seg_ptr = [&](int rank) { return buf + segs.offset(rank) * elem; };
  auto send_ptr = [&](int rank) -> const std::byte* {
    return rank == ctx.rank && own != nullptr ? own : seg_ptr(rank);
  };
  auto seg_bytes = [&](int rank) { return segs.length(rank) * elem; };
  // Step k sends segment rank_at(p - k) and receives segment rank_at(p - 1 - k).
  auto sent_seg = [&](int k) { return ring.rank_at(p - k); };
  auto recv_seg = [&](int k) { return ring.rank_at(p - 1 - k); };

  auto next = ctx.links->link(ring.rank_at(p + 1), deadline);
  if (!next.ok()) return next.status();
  auto prev = ctx.links->link(ring.rank_at(p - 1), deadline);
  if (!prev.ok()) return prev.status();

  int sk = 0, rk = 0;  // the steps being sent and received
  size_t sent = 0;     // bytes of step sk already sent
  Landing landing = Landing::copy(seg_ptr(recv_seg(0)), seg_bytes(recv_seg(0)));
  Waiter waiter(what, deadline);
  while (sk <= n - 2 || rk <= n - 2) {
    bool moved = false;
    if (sk <= n - 2) {
      // Step sk forwards what step sk-1 received: only the bytes that have landed.
      const size_t total = seg_bytes(sent_seg(sk));
      const size_t ready = (sk == 0 || rk > sk - 1) ? total : landing.landed();
      if (sent < ready) {
        const std::byte* from = send_ptr(sent_seg(sk)) + sent;
        auto n_sent = sk == 0 && own != nullptr ? (*next)->lend_input(from, ready - sent)
                                                : (*next)->lend_some(from, ready - sent);
        if (!n_sent.ok()) return n_sent.status();
        sent += *n_sent;
        moved |= *n_sent > 0;
      }
      if (sent == total) {
        ++sk;
        sent = 0;
      }
    }
    if (rk <= n - 2) {
      auto got = receive_into(**prev, landing);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
      if (landing.done() && ++rk <= n - 2) {
        landing = Landing::copy(seg_ptr(recv_seg(rk)), seg_bytes(recv_seg(rk)));
      }
    }
    if (!moved) moved = place_own.step();
    if (absl::Status s = waiter.after_pass(moved, *next, *prev); !s.ok()) return s;
  }
  place_own.finish();
  return absl::OkStatus();
}

absl::Status allgather_ring(const AlgoContext& ctx, const CollectiveArgs& args) {
  return ring_allgather(ctx, args.recv, Segments::uniform(args.count), args.elem_bytes(),
                        args.deadline, "allgather (ring)", args.send);
}

}  // namespace weft
