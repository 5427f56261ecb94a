// Push allreduce, for two ranks over shm with large vectors.
//
// The ring moves each rank's reduced half to the peer in a second pass: the peer reads it
// back out of our output with process_vm_readv, from memory, long after we wrote it. Here
// each rank reads the peer's copy of its own half (offered, process_vm_readv), reduces it a
// stretch at a time, and while the stretch is still in the cache writes it both into its
// own output and straight into the peer's output (process_vm_writev). Both passes become
// one, and the second copy reads from the cache instead of memory.
//
// Each rank first sends its output's address and whether it may write into the peer (the
// kernel checks writes on the same terms as the reads the shm probe proved). Unless both
// may, both run the ring instead. Last, each tells the other its half has landed; kAvg's
// division runs over the whole vector on each rank, after both halves are in.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/algorithm.hpp"
#include "collectives/ring_layout.hpp"
#include "collectives/stream.hpp"
#include "src/base/copy.hpp"

namespace weft {
namespace {

// What each rank tells the other first.
struct PushHeader {
  uint64_t output = 0;    // where the peer's half of the result goes in our memory
  uint64_t can_push = 0;  // 1: we may write into the peer's memory
};

// Writes every reduced stretch into the peer's output; the first failure sticks.
class EchoToPeer : public ResultEcho {
 public:
  EchoToPeer(transport::Pair& pair, uint64_t address) : pair_(pair), address_(address) {}
  void echo(size_t offset, const std::byte* data, size_t len) override {
    if (status_.ok()) status_ = pair_.write_to_peer(address_ + offset, data, len);
  }
  const absl::Status& status() const { return status_; }

 private:
  transport::Pair& pair_;
  uint64_t address_;
  absl::Status status_;
};

// Sends `out` and receives `in` (both `bytes` long) over `pair`.
absl::Status swap_words(transport::Pair& pair, const void* out, void* in, size_t bytes,
                        Waiter& waiter) {
  size_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    bool moved = false;
    if (sent < bytes) {
      auto k = pair.send_some(static_cast<const std::byte*>(out) + sent, bytes - sent);
      if (!k.ok()) return k.status();
      sent += *k;
      moved |= *k > 0;
    }
    if (got < bytes) {
      auto k = pair.recv_into(static_cast<std::byte*>(in) + got, bytes - got);
      if (!k.ok()) return k.status();
      got += *k;
      moved |= *k > 0;
    }
    if (absl::Status s = waiter.after_pass(moved, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status allreduce_push(const AlgoContext& ctx, const CollectiveArgs& args) {
  auto peer = link_to_the_other_rank(ctx, args.deadline, "allreduce (push)");
  if (!peer.ok()) return peer.status();
  const int position = ctx.schedule->position_of(ctx.rank);
  Waiter waiter("allreduce (push)", args.deadline);

  const PushHeader ours{reinterpret_cast<uint64_t>(args.recv), (*peer)->can_write_to_peer() ? 1u : 0u};
  PushHeader theirs;
  if (absl::Status s = swap_words(**peer, &ours, &theirs, sizeof ours, waiter); !s.ok()) return s;
  if (ours.can_push == 0 || theirs.can_push == 0) return allreduce_ring(ctx, args);

  const Segments segs = Segments::split(args.count, 2);
  const size_t elem = args.elem_bytes();
  const int peer_rank = (*peer)->peer();
  const size_t mine = segs.offset(ctx.rank) * elem, my_bytes = segs.length(ctx.rank) * elem;
  const size_t yours = segs.offset(peer_rank) * elem, your_bytes = segs.length(peer_rank) * elem;
  // Streamed as the ring's landing is: past the caches only when far larger than them.
  const bool in_place = args.send == args.recv;
  std::byte* const block =
      !in_place && my_bytes >= stream_copies_from() ? ctx.stream_block : nullptr;
  Landing landing = Landing::reduce_streamed(
      args.recv + mine, args.send + mine, my_bytes, reduce_fn(args.type, args.op), elem, block,
      position == 0 ? Operands::kLocalFirst : Operands::kIncomingFirst);
  EchoToPeer echo(**peer, theirs.output + mine);
  landing.echo_to(&echo);

  // The peer reads its half of our input from our memory, reduces it and writes the result
  // into our output: in place, it reads each stretch before it writes it.
  size_t sent = 0;
  while (sent < your_bytes || !landing.done()) {
    bool moved = false;
    if (sent < your_bytes) {
      auto k = (*peer)->offer_some(args.send + yours + sent, your_bytes - sent);
      if (!k.ok()) return k.status();
      sent += *k;
      moved |= *k > 0;
    }
    if (!landing.done()) {
      auto got = receive_into(**peer, landing);
      if (!got.ok()) return got.status();
      if (!echo.status().ok()) return echo.status();
      moved |= *got > 0;
    }
    if (absl::Status s = waiter.after_pass(moved, *peer, nullptr); !s.ok()) return s;
  }
  // Our half is in the peer's output once the last write returned; wait for theirs in ours.
  const uint64_t landed = 1;
  uint64_t peer_landed = 0;
  if (absl::Status s = swap_words(**peer, &landed, &peer_landed, sizeof landed, waiter); !s.ok()) {
    return s;
  }
  if (peer_landed != 1) {
    return absl::DataLossError(absl::StrCat("allreduce (push): rank ", peer_rank,
                                            " sent a malformed end-of-half word"));
  }
  if (args.op == ReduceOp::kAvg) finish_average(args.recv, args.count, args.type, 2);
  return absl::OkStatus();
}

}  // namespace weft
