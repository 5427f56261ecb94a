// Recursive-doubling allreduce, for small messages: log2(N) exchanges of the whole vector
// instead of the ring's 2(N-1) steps, so latency wins over bandwidth.
//
// With P the largest power of two <= N, the N-P "extra" ring positions first hand their
// vector to a partner among the first N-P positions and wait. The P remaining positions
// then exchange with the position at distance 1, 2, 4, ... (p XOR mask) and reduce. Last,
// each partner hands the result back to its extra. Both partners of an exchange put the
// lower position's vector first (Operands): max and min of +0 and -0, or of two NaNs,
// depend on the order, and every rank must end with identical bits.
//
// An exchange needs no scratch buffer: the incoming vector is reduced into the output only
// where the output has already been sent, so both directions stream at once. Out of place,
// a rank's first exchange (or hand-over, or fold) works straight from the input, reducing
// it with the partner's into the output, so the input is never copied into the output
// first (at 64 KiB that copy and the send's were a tenth of the call). Every message
// starts with the call check's state (collectives/call_check.hpp): this algorithm moves data
// in the check's own pattern, so the check rides along instead of costing rounds of its own.
#include <cstring>

#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"
#include "src/base/copy.hpp"

namespace weft {
namespace {

// Trades over `pair`: our state (`ours`) and then `out` go out while the partner's state
// (`theirs`) and then its bytes come in. Where the landing writes into `out` itself
// (`lands_on_out`), only where `out` has already left, so both directions stream at once
// without a scratch buffer. An exchange passes one round
// as both; an extra passes its hand-over and the hand-back, which it hears while still
// sending: on a mismatch the partner drops our vector and hands back its verdict, and we
// must hear that rather than wait for ring or socket room it will never make. Once a
// mismatch is known the vectors stay put.
absl::Status trade(transport::Pair& pair, const std::byte* out, bool lands_on_out, size_t bytes,
                   AgreementRound& ours, AgreementRound& theirs, Landing landing,
                   Waiter& waiter) {
  size_t sent = 0;
  if (bytes <= AgreementRound::kCarryBytes && ours.data_follows()) {
    ours.carry(out, bytes);  // copied: the landing may overwrite `out` at once
    sent = bytes;
  }
  if (bytes <= AgreementRound::kCarryBytes) theirs.expect_carried(bytes);
  while (!ours.sent() || !theirs.merged() ||
         (theirs.data_follows() && (sent < bytes || !landing.done()))) {
    bool moved = false;
    if (!ours.sent()) {
      auto k = ours.send(pair, sent < bytes);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (ours.sent() && sent < bytes && ours.data_follows()) {
      auto k = pair.send_some(out + sent, bytes - sent);
      if (!k.ok()) return theirs.unless_calls_differ(pair, k.status());
      sent += *k;
      moved |= *k > 0;
    }
    // Ours leaves before we look for theirs: looking costs a cross-core cache miss (~0.1 us).
    if (!theirs.merged()) {
      auto k = theirs.receive(pair);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (theirs.merged() && theirs.data_follows()) {
      // Never overwrite bytes that have not left yet.
      auto got = theirs.receive_data(pair, landing,
                                     lands_on_out ? sent - landing.accepted() : SIZE_MAX);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
    }
    if (absl::Status s = waiter.after_pass(moved, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Our state, then (unless a mismatch is known) the vector.
absl::Status send_all(transport::Pair& pair, const std::byte* buf, size_t bytes,
                      CallAgreement& known, int n, Waiter& waiter) {
  AgreementRound round(known, n);
  const bool carried = bytes <= AgreementRound::kCarryBytes && round.data_follows();
  if (carried) round.carry(buf, bytes);
  if (absl::Status s = state_round(&pair, nullptr, round, waiter, !carried); !s.ok()) return s;
  if (carried || !round.data_follows()) return absl::OkStatus();
  for (size_t sent = 0; sent < bytes;) {
    auto n = pair.send_some(buf + sent, bytes - sent);
    if (!n.ok()) return n.status();
    sent += *n;
    if (absl::Status s = waiter.after_pass(*n > 0, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The peer's state, then (unless a mismatch is known) its vector.
absl::Status receive_all(transport::Pair& pair, Landing landing, CallAgreement& known, int n,
                         Waiter& waiter) {
  AgreementRound round(known, n);
  if (landing.bytes() <= AgreementRound::kCarryBytes) {
    round.expect_carried(landing.bytes(), landing.direct_destination());
  }
  if (absl::Status s = state_round(nullptr, &pair, round, waiter); !s.ok()) return s;
  while (round.data_follows() && !landing.done()) {
    auto got = round.receive_data(pair, landing);
    if (!got.ok()) return got.status();
    if (absl::Status s = waiter.after_pass(*got > 0, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status allreduce_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args) {
  if (ctx.agreement == nullptr) {
    return absl::InternalError("allreduce (recursive doubling) run without its call check");
  }
  CallAgreement& known = *ctx.agreement;
  const size_t bytes = args.count * args.elem_bytes();
  const int n = ctx.size;
  if (n == 1) {
    if (args.send != args.recv) copy_bytes(args.recv, args.send, bytes);
    return absl::OkStatus();
  }
  const ReduceFn fn = reduce_fn(args.type, args.op);
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  Waiter waiter("allreduce (recursive doubling)", args.deadline);
  auto link = [&](int position) { return ctx.links->link(ring.rank_at(position), args.deadline); };

  // Where our partial result is: the input until the first fold or exchange writes the output.
  const std::byte* ours = args.send;
  auto lands_on_ours = [&] { return ours == args.recv; };
  if (p >= pow2) {  // an extra: hand over the vector, get the result back
    auto partner = link(p - pow2);
    if (!partner.ok()) return partner.status();
    AgreementRound handed(known, n), back(known, n);
    return trade(**partner, ours, lands_on_ours(), bytes, handed, back,
                 Landing::copy(args.recv, bytes), waiter);
  }
  transport::Pair* extra = nullptr;
  if (p < n - pow2) {
    auto e = link(p + pow2);
    if (!e.ok()) return e.status();
    extra = *e;
    Landing fold = Landing::reduce(args.recv, ours, bytes, fn, args.elem_bytes());
    if (absl::Status s = receive_all(*extra, fold, known, n, waiter); !s.ok()) {
      return s;
    }
    ours = args.recv;
  }
  for (int mask = 1; mask < pow2; mask *= 2) {
    auto peer = link(p ^ mask);
    if (!peer.ok()) return peer.status();
    const Operands order = (p ^ mask) < p ? Operands::kIncomingFirst : Operands::kLocalFirst;
    const Landing reduced = Landing::reduce(args.recv, ours, bytes, fn, args.elem_bytes(), order);
    AgreementRound round(known, n);
    if (absl::Status s = trade(**peer, ours, lands_on_ours(), bytes, round, round, reduced, waiter);
        !s.ok()) {
      return s;
    }
    ours = args.recv;
  }
  if (args.op == ReduceOp::kAvg) finish_average(args.recv, args.count, args.type, n);
  if (extra != nullptr) {
    return send_all(*extra, args.recv, bytes, known, n, waiter);
  }
  return absl::OkStatus();
}

}  // namespace weft
