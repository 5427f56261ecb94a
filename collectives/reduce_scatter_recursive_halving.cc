// Recursive-halving reduce-scatter, for small messages on a power-of-two number of ranks:
// log2(N) exchanges, each moving half as much as the one before, so a rank sends
// (N-1)/N of the vector in all, as in the ring, but in log2(N) steps instead of N-1.
// Recursive doubling (reduce_scatter_recursive_doubling.cc) moves the whole vector at every
// step; at two ranks this sends half of it, and up to AgreementRound::kCarryBytes of that
// in the same write as the call check's state.
//
// The exchanges go in the call check's order, distance d = 1, 2, 4, ... on ring positions,
// so the check rides in band. Before the exchange at distance d, position p holds partial
// sums of its "live" blocks, those of the positions that agree with p on the bits below d:
// live block m is that of position (p mod d) + m * d. p keeps the live blocks whose bit d
// is p's own (every other m) and sends the others, which are exactly the ones its partner
// keeps, in the same order, so the partner's arrive in order and are reduced into ours.
// The first exchange reads the caller's send buffer, each later one the partial sums the
// one before wrote to the relay, and the last writes the caller's output. Both partners of
// an exchange put the lower position's operand first (Operands).
#include "collectives/algorithm.hpp"
#include "collectives/block_trade.hpp"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"
#include "src/base/copy.hpp"

namespace weft {

absl::Status reduce_scatter_recursive_halving(const AlgoContext& ctx, const CollectiveArgs& args) {
  if (ctx.agreement == nullptr) {
    return absl::InternalError("reduce_scatter (recursive halving) run without its call check");
  }
  const int n = ctx.size;  // a power of two: choose_algorithm refuses other counts
  const size_t block = args.count * args.elem_bytes();
  const std::byte* own = args.send + block * static_cast<size_t>(ctx.rank);
  if (n == 1) {
    if (args.recv != own) copy_bytes(args.recv, own, block);
    return absl::OkStatus();
  }
  // The exchanges before the last write N/2 + N/4 + ... + 2 = N - 2 blocks of partial sums.
  if (block * static_cast<size_t>(n - 2) > ctx.relay.capacity) {
    // WEFT_SMALL_MESSAGE_BYTES above WEFT_RELAY_BYTES: check the call on its own, then ring.
    if (absl::Status s = agree(ctx, *ctx.agreement, args.deadline); !s.ok()) return s;
    if (absl::Status s = ctx.agreement->verdict(); !s.ok()) return s;
    return reduce_scatter_ring(ctx, args);
  }
  const ReduceFn fn = reduce_fn(args.type, args.op);
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  Waiter waiter("reduce_scatter (recursive halving)", args.deadline);
  const std::byte* sums = nullptr;  // the last exchange's partial sums, live block m at m*block
  std::byte* next = ctx.relay.data;
  for (int d = 1; d < n; d *= 2) {
    auto pair = ctx.links->link(ring.rank_at(p ^ d), args.deadline);
    if (!pair.ok()) return pair.status();
    const size_t kept = static_cast<size_t>(n / (2 * d));
    const size_t bit = (p & d) != 0 ? 1 : 0;
    auto live = [&](size_t m) {
      return d == 1 ? args.send + block * static_cast<size_t>(ring.rank_at(static_cast<int>(m)))
                    : sums + m * block;
    };
    std::byte* const out = 2 * d == n ? args.recv : next;
    const Operands order = (p ^ d) < p ? Operands::kIncomingFirst : Operands::kLocalFirst;
    auto sent = [&](size_t j) { return live(2 * j + 1 - bit); };
    auto reduced = [&](size_t j) {
      return Landing::reduce(out + j * block, live(2 * j + bit), block, fn, args.elem_bytes(),
                             order);
    };
    // Through the ring (no offer), as recursive doubling sends: these are small messages, and
    // on some machines an offer (a process_vm_readv by the partner) costs more than two
    // copies below 64 KiB or so.
    AgreementRound round(*ctx.agreement, n);
    if (absl::Status s = trade_blocks(**pair, round, kept, block, sent, reduced,
                                      /*offer=*/false, /*idle=*/nullptr, waiter);
        !s.ok()) {
      return s;
    }
    sums = out;
    next = out + kept * block;
  }
  if (args.op == ReduceOp::kAvg) finish_average(args.recv, args.count, args.type, n);
  return absl::OkStatus();
}

}  // namespace weft
