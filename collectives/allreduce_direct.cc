// Direct allreduce, for small vectors on 3 to 16 ranks over shm:
// every rank sends its vector to every other rank at once, then reduces all N of them, one
// exchange instead of recursive doubling's log2(N) (collectives/direct_exchange.hpp).
//
// Every rank reduces the N vectors in rank order, ((x0 op x1) op x2) op ..., so all of them
// get the same bits whatever the op (max and min keep the first of two equal operands, and
// float sums depend on the grouping). A peer's vector waits for its turn where the link left
// it: read with the peer's state, or still on the link.
//
// Only vectors that ride with the call check's state are reduced so: above that (by name)
// the states go alone and the ring moves the data, since reducing in rank order overwrites
// an in-place input that later turns still need, and a copy of it would take memory on the
// data path.
#include "collectives/algorithm.hpp"
#include "collectives/direct_exchange.hpp"
#include "collectives/reduce.hpp"
#include "src/base/copy.hpp"

namespace weft {

absl::Status allreduce_direct(const AlgoContext& ctx, const CollectiveArgs& args) {
  const size_t bytes = args.count * args.elem_bytes();
  const bool carried = bytes <= AgreementRound::kCarryBytes;
  std::byte mine[AgreementRound::kCarryBytes];  // our input, which the output may overwrite
  if (carried) copy_bytes(mine, args.send, bytes);
  if (ctx.direct == nullptr) return absl::InternalError("allreduce (direct) run without its state");
  DirectExchange& x = *ctx.direct;
  if (absl::Status s = x.start(ctx, args.deadline, mine, carried ? bytes : 0,
                               [](int) -> std::byte* { return nullptr; }, /*more=*/false);
      !s.ok()) {
    return s;
  }
  Waiter waiter("allreduce (direct)", args.deadline);
  for (bool done = false; !done;) {
    auto moved = x.trade_states(done);
    if (!moved.ok()) return moved.status();
    if (done) break;
    if (absl::Status s = waiter.after_pass(*moved, x.waiting_on()); !s.ok()) return s;
  }
  if (!ctx.agreement->verdict().ok()) return absl::OkStatus();  // the caller reports it
  if (!carried) {
    AlgoContext checked = ctx;
    checked.agreement = nullptr;
    return allreduce_ring(checked, args);
  }
  const ReduceFn fn = reduce_fn(args.type, args.op);
  for (int r = 0; r < ctx.size; ++r) {
    if (r == ctx.rank) {
      if (r == 0) {
        copy_bytes(args.recv, mine, bytes);
      } else {
        fn(args.recv, args.recv, mine, args.count);
      }
      continue;
    }
    DirectPeer& t = x.peer_of_rank(r);
    t.landing = r == 0 ? Landing::copy(args.recv, bytes)
                       : Landing::reduce(args.recv, args.recv, bytes, fn, args.elem_bytes());
    while (!t.landing.done()) {
      auto got = t.round->receive_data(*t.pair, t.landing);
      if (!got.ok()) return got.status();
      if (absl::Status s = waiter.after_pass(*got > 0, t.pair); !s.ok()) return s;
    }
  }
  if (args.op == ReduceOp::kAvg) finish_average(args.recv, args.count, args.type, ctx.size);
  return absl::OkStatus();
}

}  // namespace weft
