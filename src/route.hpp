// The communicator's route: the links and rails out of use, the ring that avoids the links
// and which links the algorithms may use, for one epoch. Every rank holds the same route: it changes only by
// a RouteChange that all ranks adopt at the end of the same call (collectives/call_check.hpp,
// src/isolation.hpp), and the router (src/router.hpp) derives the same ring from it on each.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"
#include "collectives/collective.hpp"
#include "src/router.hpp"
#include "src/base/peer_info.hpp"

namespace weft {

class Route {
 public:
  Route() = default;
  /// Epoch 0 around `isolated` (nothing: each host's ranks together in rank order). `peers`
  /// by rank.
  explicit Route(const std::vector<PeerInfo>& peers, LinkSet isolated = {});

  const Schedule& schedule() const { return schedule_; }
  uint64_t epoch() const { return schedule_.epoch(); }
  const LinkSet& isolated() const { return isolated_; }
  /// Whether `rank`'s rail `rail` is out of use: its links stripe over its other rails.
  bool rail_isolated(int rank, int rail) const { return rails_.contains({rank, rail}); }
  /// The isolated rails, as (rank, rail).
  const std::set<std::pair<int, int>>& isolated_rails() const { return rails_; }
  /// Which algorithms' links are all in use.
  UsableLinks usable() const { return usable_; }

  /// Applies a change every rank adopted. When it changes the set, a new epoch starts and the
  /// result says what the route costs now (a line for the log); otherwise it is empty.
  std::string adopt(const RouteChange& change);

 private:
  /// The ring around isolated_ and the usable patterns, as epoch `epoch`.
  void reroute(uint64_t epoch);

  std::vector<std::vector<int>> hosts_;  // ranks_by_host, once
  LinkSet isolated_;
  std::set<std::pair<int, int>> rails_;
  Schedule schedule_;
  UsableLinks usable_;
  size_t crossings_ = 0;  // ring neighbours on different hosts
};

}  // namespace weft
