// The direct exchange's links: every rank sends its call check's state, and a small payload
// riding with it, to every peer at once, and hears one from each. No message waits for
// another to arrive first, which matters when ranks share cores: each exchange that must
// finish before the next can start costs a context switch.
//
// Every state leaves before any is heard, so each says only what this rank calls and relays
// nobody's (CallAgreement::direct). Ranks only run the direct exchange together unless their
// calls differ; then those that ran the check's rounds answer over the links the rounds leave
// unused (trade_states_off_the_rounds, collectives/call_check.hpp).
//
// The rounds' partners come first, in the rounds' own order (an extra's partner, then XOR
// distances 1, 2, 4, ...; collectives/call_check.hpp: rounds_link): a link is made when both
// ends ask for it, and ranks running the rounds ask for the other links only after them, so
// their partners' states must leave first. The other peers follow by XOR distance, in the
// same order on every rank, so no two wait on each other's link.
#pragma once

#include <bit>
#include <cstddef>
#include <optional>

#include "absl/status/status.h"
#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"

namespace weft {

/// One peer's side of the exchange.
struct DirectPeer {
  int rank = -1;
  transport::Pair* pair = nullptr;
  std::optional<AgreementRound> round;
  Landing landing;  // where the peer's data goes, set by the algorithm
  size_t sent = 0;  // bytes of our data sent, the carried ones included
};

class DirectExchange {
 public:
  /// Connects to every peer and sends each our state with the first `carried` bytes of `data`
  /// (at most AgreementRound::kCarryBytes) behind it; they must stay unchanged until every
  /// state has left. Each peer's state is expected with as many bytes behind it, read
  /// straight to `into(rank)` where that is not null. `more`: the caller sends more data
  /// over each link right after the state.
  template <typename Into>
  absl::Status start(const AlgoContext& ctx, Deadline deadline, const std::byte* data,
                     size_t carried, Into into, bool more);

  int peers() const { return count_; }
  DirectPeer& peer(int i) { return peers_[i]; }
  DirectPeer& peer_of_rank(int rank) { return peers_[index_of_rank_[rank]]; }

  /// One pass over the states: ours out, theirs in. Returns whether any byte moved; `done`
  /// says whether every state has left and been heard.
  absl::StatusOr<bool> trade_states(bool& done);
  /// After trade_states: the first link whose state has not left or been heard (null when
  /// none), the one a waiter checks for a dead peer.
  transport::Pair* waiting_on() const { return waiting_; }

 private:
  DirectPeer peers_[kMostDirectRanks - 1];
  int index_of_rank_[kMostDirectRanks] = {};
  int count_ = 0;
  bool more_ = false;
  transport::Pair* waiting_ = nullptr;
};

template <typename Into>
absl::Status DirectExchange::start(const AlgoContext& ctx, Deadline deadline,
                                   const std::byte* data, size_t carried, Into into,
                                   bool more) {
  const int n = ctx.size;
  if (ctx.agreement == nullptr || n > kMostDirectRanks) {
    return absl::InternalError("direct exchange run without its call check or on too many ranks");
  }
  ctx.agreement->direct = true;
  count_ = 0;  // the exchange is the communicator's, reused call after call
  waiting_ = nullptr;
  more_ = more;
  const Schedule& ring = *ctx.schedule;
  const int p = ring.position_of(ctx.rank);
  const int pow2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  int order[kMostDirectRanks - 1];  // ring positions, in the rounds' order, then the rest
  int k = 0;
  if ((p ^ pow2) < n) order[k++] = p ^ pow2;  // the extra, or the extra's partner
  for (int d = 1; p < pow2 && d < pow2; d *= 2) order[k++] = p ^ d;
  k += positions_off_the_rounds(p, n, order + k);
  for (int i = 0; i < k; ++i) {
    DirectPeer& t = peers_[count_];
    t.rank = ring.rank_at(order[i]);
    index_of_rank_[t.rank] = count_++;
    auto pair = ctx.links->link(t.rank, deadline);
    if (!pair.ok()) return pair.status();
    t.pair = *pair;
    AgreementRound& round = t.round.emplace(*ctx.agreement, n);
    t.landing = Landing();
    t.sent = 0;
    if (carried > 0) {
      round.expect_carried(carried, into(t.rank));
      round.carry_in_place(data, carried);
      t.sent = carried;
    }
    if (auto s = round.send(*t.pair, more); !s.ok()) return s.status();
  }
  return absl::OkStatus();
}

inline absl::StatusOr<bool> DirectExchange::trade_states(bool& done) {
  bool moved = false;
  done = true;
  waiting_ = nullptr;
  // Ours leave on every link before we look for theirs: looking costs a cross-core miss.
  for (int i = 0; i < count_; ++i) {
    DirectPeer& t = peers_[i];
    if (t.round->sent()) continue;
    auto k = t.round->send(*t.pair, more_);
    if (!k.ok()) return k.status();
    moved |= *k > 0;
  }
  for (int i = 0; i < count_; ++i) {
    DirectPeer& t = peers_[i];
    if (!t.round->merged()) {
      auto k = t.round->receive(*t.pair);
      if (!k.ok()) return k.status();
      moved |= *k > 0;
    }
    if (!t.round->sent() || !t.round->merged()) {
      done = false;
      if (waiting_ == nullptr) waiting_ = t.pair;
    }
  }
  return moved;
}

}  // namespace weft
