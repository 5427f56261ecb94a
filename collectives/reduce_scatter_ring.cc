// Ring reduce-scatter.
//
// The vector is cut into one segment per rank. In N-1 steps every rank sends one segment to
// the next rank of the ring and receives another from the previous one, reducing it with its
// own copy of that segment; the segment it receives at step k is the one it sends at step
// k+1, so after N-1 steps each rank holds one fully reduced segment: its own.
//
// Steps are not separated: the outgoing stream is "own segment, then everything received so
// far", so a byte reduced at step k leaves at step k+1 as soon as it has landed. Partial
// reductions wait in the communicator's relay, a bounded FIFO, which keeps memory use fixed
// whatever the message size; the link's own buffer and the relay set the pipeline depth.
#include <cstring>

#include "collectives/algorithm.hpp"
#include "collectives/ring.hpp"
#include "collectives/stream.hpp"

namespace weft {

absl::Status ring_reduce_scatter(const AlgoContext& ctx, const std::byte* in, std::byte* out,
                                 const Segments& segs, DataType type, ReduceOp op,
                                 Deadline deadline, const char* what) {
  const int n = ctx.size;
  const size_t elem = size_of(type);
  const ReduceFn fn = reduce_fn(type, op);
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  auto seg_ptr = [&](int rank) { return in + segs.offset(rank) * elem; };
  auto seg_bytes = [&](int rank) { return segs.length(rank) * elem; };
  // The segment sent at step k and the one received at step k.
  auto sent_seg = [&](int k) { return ring.rank_at(p - 1 - k); };
  auto recv_seg = [&](int k) { return ring.rank_at(p - 2 - k); };

  if (n == 1) {
    if (out != seg_ptr(ctx.rank)) std::memmove(out, seg_ptr(ctx.rank), seg_bytes(ctx.rank));
    return absl::OkStatus();
  }
  auto next = ctx.links->link(ring.rank_at(p + 1), deadline);
  if (!next.ok()) return next.status();
  auto prev = ctx.links->link(ring.rank_at(p - 1), deadline);
  if (!prev.ok()) return prev.status();

  // Outgoing: the first segment straight from `in`, then the relay's contents.
  const std::byte* first = seg_ptr(sent_seg(0));
  const size_t first_bytes = seg_bytes(sent_seg(0));
  size_t first_sent = 0;
  size_t relay_total = 0;  // bytes that pass through the relay
  for (int k = 1; k <= n - 2; ++k) relay_total += seg_bytes(sent_seg(k));
  const Relay& relay = ctx.relay;
  uint64_t relay_read = 0, relay_written = 0;

  // Incoming: step k lands in the relay, except the last, which lands in `out`.
  int k = 0;
  size_t piece_done = 0;  // bytes of step k's segment already landed
  Landing landing;
  bool landing_open = false;

  Waiter waiter(what, deadline);
  while (first_sent < first_bytes || relay_read < relay_total || k <= n - 2) {
    bool moved = false;
    if (first_sent < first_bytes) {
      auto sent = (*next)->send_some(first + first_sent, first_bytes - first_sent);
      if (!sent.ok()) return sent.status();
      first_sent += *sent;
      moved |= *sent > 0;
    } else if (relay_read < relay_written) {
      const size_t at = relay_read % relay.capacity;
      const size_t run = std::min<uint64_t>(relay_written - relay_read, relay.capacity - at);
      auto sent = (*next)->send_some(relay.data + at, run);
      if (!sent.ok()) return sent.status();
      relay_read += *sent;
      moved |= *sent > 0;
    }

    if (k <= n - 2 && !landing_open) {
      const int seg = recv_seg(k);
      const size_t piece = seg_bytes(seg);
      if (k == n - 2) {
        landing = Landing::reduce(out, seg_ptr(seg), piece, fn, elem);
        landing_open = true;
      } else {
        // The next contiguous stretch of free relay space, in whole elements.
        const size_t at = relay_written % relay.capacity;
        size_t room = std::min<uint64_t>(relay.capacity - (relay_written - relay_read),
                                         relay.capacity - at);
        room = std::min(room - room % elem, piece - piece_done);
        if (room > 0 || piece == 0) {
          landing = Landing::reduce(relay.data + at, seg_ptr(seg) + piece_done, room, fn, elem);
          landing_open = true;
        }
      }
    }
    if (landing_open) {
      const size_t before = landing.landed();
      auto got = receive_into(**prev, landing);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
      if (k < n - 2) relay_written += landing.landed() - before;
      if (landing.done()) {
        landing_open = false;
        piece_done += landing.bytes();
        if (k == n - 2 || piece_done == seg_bytes(recv_seg(k))) {
          ++k;
          piece_done = 0;
        }
      }
    }
    if (absl::Status s = waiter.after_pass(moved, *next, *prev); !s.ok()) return s;
  }
  if (op == ReduceOp::kAvg) finish_average(out, segs.length(ctx.rank), type, n);
  return absl::OkStatus();
}

absl::Status reduce_scatter_ring(const AlgoContext& ctx, const CollectiveArgs& args) {
  return ring_reduce_scatter(ctx, args.send, args.recv, Segments::uniform(args.count), args.type,
                             args.op, args.deadline, "reduce_scatter (ring)");
}

}  // namespace weft
