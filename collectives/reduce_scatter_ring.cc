// Ring reduce-scatter.
//
// The vector is cut into one segment per rank. In N-1 steps every rank sends one segment to
// the next rank of the ring and receives another from the previous one, reducing it with its
// own copy of that segment; the segment it receives at step k is the one it sends at step
// k+1, so after N-1 steps each rank holds one fully reduced segment: its own.
//
// Segments are cut into chunks, and the steps run once per chunk round: round j moves
// chunk j of every segment through all N-1 steps. Within a round nothing waits for a step
// to finish: a byte reduced at step k leaves at step k+1 as soon as it has landed. Partial
// reductions wait in the communicator's relay, a bounded FIFO; a chunk is a quarter of the
// relay, so the relay always has room for what a round holds back and the ring cannot
// deadlock however large the message (each rank holds back at most about one chunk). With
// two ranks nothing is held back: every step is the first, sent straight from `in`, and the
// whole segment is lent at once (the link decides how much of it to keep under way).
#include <algorithm>
#include <cstring>

#include "collectives/algorithm.hpp"
#include "collectives/ring.hpp"
#include "collectives/stream.hpp"
#include "src/base/copy.hpp"

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

  const Relay& relay = ctx.relay;
  // A whole number of 8-byte words, so chunk boundaries fall between elements.
  const Chunks chunks{std::max<size_t>(8, relay.capacity / 4 / 8 * 8)};
  const size_t chunk = chunks.chunk;
  const size_t rounds = chunks.rounds(segs.length(0) * elem);  // segment 0 is the longest
  auto chunk_bytes = [&](size_t bytes, size_t round) { return chunks.bytes_in(bytes, round); };
  uint64_t relay_read = 0, relay_written = 0;
  // A result far larger than the caches, written beside its inputs rather than over them,
  // bypasses the caches: reading its old lines in first would cost a third more traffic.
  std::byte* const stream_block =
      seg_bytes(ctx.rank) >= stream_copies_from() && out != seg_ptr(ctx.rank) ? ctx.stream_block
                                                                           : nullptr;

  // Outgoing: step 0 straight from `in`, later steps from the relay. `in` stays unchanged
  // until the call returns, so step 0 is lent: over shm the peer reads it from our memory
  // (one copy, into its cache, right before it reduces it) instead of through the ring, and
  // tcp keeps it there to send again instead of copying it. (An allreduce in place writes
  // its allgather over `in` before the call returns, but only over bytes the next rank has
  // read: what lands there was reduced from them.)
  size_t out_round = 0, out_done = 0;
  int out_step = 0;
  // Incoming: every step lands in the relay except the last, which lands in `out`.
  size_t in_round = 0, in_done = 0;
  int in_step = 0;
  Landing landing;
  bool landing_open = false;

  Waiter waiter(what, deadline);
  while (out_round < rounds || in_round < rounds) {
    bool moved = false;
    // Skip finished (or empty) pieces, then send from the current one. (A lend of two ranks
    // may finish several pieces at once.)
    while (out_round < rounds &&
           out_done >= chunk_bytes(seg_bytes(sent_seg(out_step)), out_round)) {
      out_done -= chunk_bytes(seg_bytes(sent_seg(out_step)), out_round);
      if (++out_step == n - 1) out_step = 0, ++out_round;
    }
    if (out_round < rounds) {
      // With two ranks every step is step 0, and its rounds lie end to end in `in`: the rest
      // of the segment is lent at once, so that a link may keep several messages of it under
      // way instead of one chunk at a time (ucx: 8-24% off 4-64 MiB allreduces).
      const size_t want =
          n == 2 ? seg_bytes(sent_seg(0)) - out_round * chunk - out_done
                 : chunk_bytes(seg_bytes(sent_seg(out_step)), out_round) - out_done;
      absl::StatusOr<size_t> sent = size_t{0};
      if (out_step == 0) {
        sent = (*next)->lend_to_reduce(seg_ptr(sent_seg(0)) + out_round * chunk + out_done,
                                       want);
      } else if (relay_read < relay_written) {
        const size_t at = relay_read % relay.capacity;
        const size_t run = std::min<uint64_t>({relay_written - relay_read, relay.capacity - at, want});
        sent = (*next)->send_some(relay.data + at, run);
        if (sent.ok()) relay_read += *sent;
      }
      if (!sent.ok()) return sent.status();
      out_done += *sent;
      moved |= *sent > 0;
    }

    while (!landing_open && in_round < rounds) {
      const int seg = recv_seg(in_step);
      const size_t piece = chunk_bytes(seg_bytes(seg), in_round);
      if (in_done == piece) {
        in_done = 0;
        if (++in_step == n - 1) in_step = 0, ++in_round;
        continue;
      }
      const size_t offset = in_round * chunk + in_done;
      if (in_step == n - 2) {
        landing = Landing::reduce_streamed(out + offset, seg_ptr(seg) + offset,
                                           piece - in_done, fn, elem, stream_block);
        landing_open = true;
        break;
      }
      // The next contiguous stretch of free relay space, in whole elements.
      const size_t at = relay_written % relay.capacity;
      size_t room = std::min<uint64_t>(relay.capacity - (relay_written - relay_read),
                                       relay.capacity - at);
      room = std::min(room - room % elem, piece - in_done);
      if (room == 0) break;  // wait for the outgoing side to drain the relay
      landing = Landing::reduce(relay.data + at, seg_ptr(seg) + offset, room, fn, elem);
      landing_open = true;
    }
    if (landing_open) {
      const size_t before = landing.landed();
      auto got = receive_into(**prev, landing);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
      if (in_step < n - 2) relay_written += landing.landed() - before;
      if (landing.done()) {
        landing_open = false;
        in_done += landing.bytes();
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
