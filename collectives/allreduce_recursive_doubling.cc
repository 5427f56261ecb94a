// Recursive-doubling allreduce, for small messages: log2(N) exchanges of the whole vector
// instead of the ring's 2(N-1) steps, so latency wins over bandwidth.
//
// With P the largest power of two <= N, the N-P "extra" ring positions first hand their
// vector to a partner among the first N-P positions and wait. The P remaining positions
// then exchange with the position at distance 1, 2, 4, ... (p XOR mask) and reduce. Last,
// each partner hands the result back to its extra. Partners compute a op b and b op a, which
// are bitwise equal for every supported op, so every rank ends with identical bits.
//
// An exchange needs no scratch buffer: the incoming vector is reduced into the output only
// where the output has already been sent, so both directions stream at once.
#include <cstring>

#include "collectives/algorithm.hpp"
#include "collectives/stream.hpp"
#include "src/copy.hpp"

namespace weft {
namespace {

// Sends `buf` to `pair` while reducing the peer's copy into it.
absl::Status exchange(transport::Pair& pair, std::byte* buf, size_t bytes,
                      const CollectiveArgs& args, ReduceFn fn, Waiter& waiter) {
  size_t sent = 0;
  Landing landing = Landing::reduce(buf, buf, bytes, fn, args.elem_bytes());
  while (sent < bytes || !landing.done()) {
    bool moved = false;
    if (sent < bytes) {
      auto n = pair.send_some(buf + sent, bytes - sent);
      if (!n.ok()) return n.status();
      sent += *n;
      moved |= *n > 0;
    }
    // Never overwrite bytes that have not left yet.
    auto got = receive_into(pair, landing, sent - landing.accepted());
    if (!got.ok()) return got.status();
    moved |= *got > 0;
    if (absl::Status s = waiter.after_pass(moved, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status send_all(transport::Pair& pair, const std::byte* buf, size_t bytes, Waiter& waiter) {
  for (size_t sent = 0; sent < bytes;) {
    auto n = pair.send_some(buf + sent, bytes - sent);
    if (!n.ok()) return n.status();
    sent += *n;
    if (absl::Status s = waiter.after_pass(*n > 0, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status receive_all(transport::Pair& pair, Landing landing, Waiter& waiter) {
  while (!landing.done()) {
    auto got = receive_into(pair, landing);
    if (!got.ok()) return got.status();
    if (absl::Status s = waiter.after_pass(*got > 0, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status allreduce_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args) {
  const size_t bytes = args.count * args.elem_bytes();
  if (args.send != args.recv) copy_bytes(args.recv, args.send, bytes);
  const int n = ctx.size;
  if (n == 1) return absl::OkStatus();
  const ReduceFn fn = reduce_fn(args.type, args.op);
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  Waiter waiter("allreduce (recursive doubling)", args.deadline);
  auto link = [&](int position) { return ctx.links->link(ring.rank_at(position), args.deadline); };

  if (p >= pow2) {  // an extra: hand over the vector, get the result back
    auto partner = link(p - pow2);
    if (!partner.ok()) return partner.status();
    if (absl::Status s = send_all(**partner, args.recv, bytes, waiter); !s.ok()) return s;
    return receive_all(**partner, Landing::copy(args.recv, bytes), waiter);
  }
  transport::Pair* extra = nullptr;
  if (p < n - pow2) {
    auto e = link(p + pow2);
    if (!e.ok()) return e.status();
    extra = *e;
    Landing fold = Landing::reduce(args.recv, args.recv, bytes, fn, args.elem_bytes());
    if (absl::Status s = receive_all(*extra, fold, waiter); !s.ok()) return s;
  }
  for (int mask = 1; mask < pow2; mask *= 2) {
    auto peer = link(p ^ mask);
    if (!peer.ok()) return peer.status();
    if (absl::Status s = exchange(**peer, args.recv, bytes, args, fn, waiter); !s.ok()) return s;
  }
  if (args.op == ReduceOp::kAvg) finish_average(args.recv, args.count, args.type, n);
  if (extra != nullptr) return send_all(*extra, args.recv, bytes, waiter);
  return absl::OkStatus();
}

}  // namespace weft
