// Recursive-doubling broadcast, for small messages: the root's data rides the call check's
// own rounds (collectives/call_check.hpp), so a small broadcast costs the check's log2(N)
// round trips and nothing after them. The chain first runs the check and then needs N-1
// more hops, each a wake-up of the next rank, before the last rank has a byte.
//
// The rounds are the check's, on ring positions: with P the largest power of two <= N, the
// N-P extra positions first hand their state to a partner among the first N-P; the first P
// exchange with the position at distance 1, 2, 4, ... (p XOR d); partners hand back last.
// The data joins where it is: an extra that is the root hands it over with its state, so
// position r (the root's, less P for an extra) holds it when the exchanges start. Before
// the exchange at distance d the holders are the positions q with (q XOR r) < d; each
// sends to its partner, which does not hold it yet, and pairs where neither holds trade
// states only. Last, every partner hands it on to its extra. Data up to AgreementRound::kCarryBytes leaves in the same write as the state.
#include <cstddef>

#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"

namespace weft {
namespace {

// Moves one round: our state (`ours`) goes out over `to`, followed by `out` when that is not
// null; the partner's state (`theirs`) comes in over `from`, followed by the data (into `in`)
// when that is not null. Either link may be null. In an exchange `ours` and `theirs` are one
// round. No data moves once a mismatch is known, and a rank that sends data must be hearing
// from its partner meanwhile: on a mismatch the partner drops the data, and the sender learns
// that from the partner's state instead of waiting on bytes nobody will read.
absl::Status move_round(AgreementRound& ours, transport::Pair* to, const std::byte* out,
                        AgreementRound& theirs, transport::Pair* from, std::byte* in,
                        size_t bytes, Waiter& waiter, IdleCopy& idle) {
  size_t sent = bytes;  // nothing to send unless we send data
  if (to != nullptr && out != nullptr && ours.data_follows()) {
    sent = 0;
    if (bytes <= AgreementRound::kCarryBytes) {
      ours.carry(out, bytes);
      sent = bytes;
    }
  }
  Landing landing = Landing::copy(in, from != nullptr && in != nullptr ? bytes : 0);
  if (landing.bytes() <= AgreementRound::kCarryBytes) {
    theirs.expect_carried(landing.bytes(), landing.direct_destination());
  }
  while ((to != nullptr && !ours.sent()) || (from != nullptr && !theirs.merged()) ||
         (ours.data_follows() && (sent < bytes || !landing.done()))) {
    bool moved = false;
    if (to != nullptr && !ours.sent()) {
      auto k = ours.send(*to, sent < bytes);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (to != nullptr && ours.sent() && sent < bytes && ours.data_follows()) {
      auto k = to->offer_some(out + sent, bytes - sent);
      if (!k.ok()) return from != nullptr ? theirs.unless_calls_differ(*from, k.status()) : k.status();
      sent += *k;
      moved |= *k > 0;
    }
    // Ours leaves before we look for theirs: looking costs a cross-core cache miss (~0.1 us).
    if (from != nullptr && !theirs.merged()) {
      auto k = theirs.receive(*from);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (from != nullptr && theirs.merged() && theirs.data_follows() && !landing.done()) {
      auto got = theirs.receive_data(*from, landing);
      if (!got.ok()) return got.status();
      moved |= *got > 0;
    }
    if (!moved) moved = idle.step();
    if (absl::Status s = waiter.after_pass(moved, to, from); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// One round in which we only hear from `from` (data into `in`, unless null).
absl::Status hear(transport::Pair* from, std::byte* in, size_t bytes, CallAgreement& known,
                  int n, Waiter& waiter, IdleCopy& idle) {
  AgreementRound round(known, n);
  return move_round(round, nullptr, nullptr, round, from, in, bytes, waiter, idle);
}

}  // namespace

absl::Status broadcast_recursive_doubling(const AlgoContext& ctx, const CollectiveArgs& args) {
  if (ctx.agreement == nullptr) {
    return absl::InternalError("broadcast (recursive doubling) run without its call check");
  }
  CallAgreement& known = *ctx.agreement;
  const size_t bytes = args.count * args.elem_bytes();
  const bool is_root = ctx.rank == args.root;
  // The root fills its own output while the links wait, and sends from its input.
  IdleCopy root_copy;
  if (is_root) root_copy = IdleCopy(args.recv, args.send, bytes, bytes);
  const std::byte* source = is_root ? args.send : args.recv;
  const int n = ctx.size;
  if (n == 1) {
    root_copy.finish();
    return absl::OkStatus();
  }
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int root_at = ring.position_of(args.root);
  const int r = root_at >= pow2 ? root_at - pow2 : root_at;
  Waiter waiter("broadcast (recursive doubling)", args.deadline);
  auto link = [&](int position) { return ctx.links->link(ring.rank_at(position), args.deadline); };

  absl::Status s;
  if (p >= pow2) {
    // An extra hands over its state (and the data, if it is the root) and hears the partner's
    // hand-back (with the data, if not) in one go: see move_round.
    auto partner = link(p - pow2);
    if (!partner.ok()) return partner.status();
    AgreementRound handed(known, n), back(known, n);
    s = move_round(handed, *partner, is_root ? source : nullptr, back, *partner,
                   is_root ? nullptr : args.recv, bytes, waiter, root_copy);
    root_copy.finish();
    return s;
  }
  transport::Pair* extra = nullptr;
  if (p < n - pow2) {
    auto e = link(p + pow2);
    if (!e.ok()) return e.status();
    extra = *e;
    s = hear(extra, p + pow2 == root_at ? args.recv : nullptr, bytes, known, n, waiter,
             root_copy);
  }
  for (int d = 1; s.ok() && d < pow2; d *= 2) {
    auto peer = link(p ^ d);
    if (!peer.ok()) return peer.status();
    // A holder's partner never holds yet; pairs where neither holds trade states only.
    const bool holds = (p ^ r) < d, partner_holds = (p ^ d ^ r) < d;
    AgreementRound round(known, n);
    s = move_round(round, *peer, holds ? source : nullptr, round, *peer,
                   partner_holds ? args.recv : nullptr, bytes, waiter, root_copy);
  }
  if (s.ok() && extra != nullptr) {
    // The extra knows all we do once it has our state, so it reads the data whenever we send it.
    AgreementRound round(known, n);
    s = move_round(round, extra, p + pow2 == root_at ? nullptr : source, round, nullptr, nullptr,
                   bytes, waiter, root_copy);
  }
  root_copy.finish();
  return s;
}

}  // namespace weft
