// The call check's rounds as messages of their own: a state round, the recursive-doubling
// rounds that algorithms not carrying the check run first (agree()), and the states that
// ranks of those rounds trade with ranks of a direct exchange (trade_states_off_the_rounds).
// The agreement itself, its wire format and the in-band round are in call_check.cc.
#include <optional>

#include "absl/strings/str_cat.h"
#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"

namespace weft {

absl::Status state_round(transport::Pair* to, transport::Pair* from, AgreementRound& round,
                         Waiter& waiter, bool data_next) {
  while ((to != nullptr && !round.sent()) || (from != nullptr && !round.merged())) {
    bool moved = false;
    if (to != nullptr) {
      auto k = round.send(*to, data_next);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (from != nullptr) {
      auto k = round.receive(*from);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (absl::Status s = waiter.after_pass(moved, to, from); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status agree(const AlgoContext& ctx, CallAgreement& known, Deadline deadline) {
  const int n = ctx.size;
  if (n == 1) return absl::OkStatus();
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  Waiter waiter("the call check before a collective", deadline);
  auto link = [&](int position) { return ctx.links->link(ring.rank_at(position), deadline); };
  // Each round starts from what is known by then.
  std::optional<AgreementRound> current;
  auto round = [&]() -> AgreementRound& { return current.emplace(known, n); };
  if (p >= pow2) {  // an extra: hand over the state, get the agreement back
    auto partner = link(p - pow2);
    if (!partner.ok()) return partner.status();
    if (absl::Status s = state_round(*partner, nullptr, round(), waiter); !s.ok()) return s;
    return state_round(nullptr, *partner, round(), waiter);
  }
  transport::Pair* extra = nullptr;
  if (p < n - pow2) {
    auto e = link(p + pow2);
    if (!e.ok()) return e.status();
    extra = *e;
    if (absl::Status s = state_round(nullptr, extra, round(), waiter); !s.ok()) return s;
  }
  for (int mask = 1; mask < pow2; mask *= 2) {
    auto peer = link(p ^ mask);
    if (!peer.ok()) return peer.status();
    if (absl::Status s = state_round(*peer, *peer, round(), waiter); !s.ok()) return s;
  }
  if (extra != nullptr) return state_round(extra, nullptr, round(), waiter);
  return absl::OkStatus();
}

absl::Status trade_states_off_the_rounds(const AlgoContext& ctx, CallAgreement& known,
                                         Deadline deadline) {
  const int n = ctx.size;
  if (n > kMostDirectRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed call check: it says a direct exchange took part, which ", n,
        " ranks do not run"));
  }
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  Waiter waiter("the call check, with the ranks of a direct exchange", deadline);
  // One state each way on every link the rounds leave unused, taken by XOR distance as the
  // direct exchange takes them. Each round here starts from all this rank knows.
  struct Off {
    transport::Pair* pair = nullptr;
    std::optional<AgreementRound> round;
  } off[kMostDirectRanks];
  int positions[kMostDirectRanks];
  const int count = positions_off_the_rounds(p, n, positions);
  for (int i = 0; i < count; ++i) {
    auto pair = ctx.links->link(ring.rank_at(positions[i]), deadline);
    if (!pair.ok()) return pair.status();
    off[i].pair = *pair;
    off[i].round.emplace(known, n);
  }
  for (;;) {
    bool moved = false;
    transport::Pair* waiting = nullptr;  // the first link not done: checked for a dead peer
    for (int i = 0; i < count; ++i) {
      AgreementRound& round = *off[i].round;
      auto sent = round.send(*off[i].pair);
      if (!sent.ok()) return sent.status();
      auto got = round.receive(*off[i].pair);
      if (!got.ok()) return got.status();
      moved |= *sent > 0 || *got > 0;
      if ((!round.sent() || !round.merged()) && waiting == nullptr) waiting = off[i].pair;
    }
    if (waiting == nullptr) break;
    if (absl::Status s = waiter.after_pass(moved, waiting); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace weft
