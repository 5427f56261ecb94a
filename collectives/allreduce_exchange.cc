// Exchange allreduce, for two ranks: each rank offers its whole input to the other and
// reduces the other's input into its output, so both compute the whole result in one pass.
// The ring moves the same bytes in two passes (half reduced, then half copied back). Here
// every byte that arrives is reduced at once, so over shm the single copy lands in a small
// cache-resident buffer rather than in the output, and the output is written once, by the
// reduction. The registry used to pick it for 64 KiB-1 MiB over shm; the push
// (allreduce_push.cc) now takes those sizes, and the exchange runs when named.
//
// Both ranks put the input of ring position 0 first, so they compute the same bits even
// where the order matters (max and min of +0 and -0, or of two NaNs).
#include "absl/strings/str_cat.h"
#include "collectives/algorithm.hpp"
#include "collectives/stream.hpp"
#include "src/base/copy.hpp"

namespace weft {

absl::Status allreduce_exchange(const AlgoContext& ctx, const CollectiveArgs& args) {
  auto peer = link_to_the_other_rank(ctx, args.deadline, "allreduce (exchange)");
  if (!peer.ok()) return peer.status();
  const int position = ctx.schedule->position_of(ctx.rank);

  const size_t bytes = args.count * args.elem_bytes();
  // In place, the output is the input the peer reads, so the peer may not read it from our
  // memory while we reduce into it: in place, a rank copies its input out to the link
  // (send_some) and reduces only into bytes that have left. Each rank decides for itself.
  const bool in_place = args.send == args.recv;
  // The result goes beside the input, far larger than the caches: stream it out.
  std::byte* const block = !in_place && bytes >= stream_copies_from() ? ctx.stream_block : nullptr;
  Landing landing = Landing::reduce_streamed(
      args.recv, args.send, bytes, reduce_fn(args.type, args.op), args.elem_bytes(), block,
      position == 0 ? Operands::kLocalFirst : Operands::kIncomingFirst);
  Waiter waiter("allreduce (exchange)", args.deadline);
  size_t sent = 0;  // bytes of our input the peer has taken
  while (sent < bytes || !landing.done()) {
    bool moved = false;
    if (sent < bytes) {
      auto n = in_place ? (*peer)->send_some(args.send + sent, bytes - sent)
                        : (*peer)->offer_some(args.send + sent, bytes - sent);
      if (!n.ok()) return n.status();
      sent += *n;
      moved |= *n > 0;
    }
    const size_t room = in_place ? sent - landing.accepted() : landing.wanted();
    if (room > 0) {
      auto got = receive_into(**peer, landing, room);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
    }
    if (absl::Status s = waiter.after_pass(moved, *peer, nullptr); !s.ok()) return s;
  }
  if (args.op == ReduceOp::kAvg) finish_average(args.recv, args.count, args.type, 2);
  return absl::OkStatus();
}

}  // namespace weft
