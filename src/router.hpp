// The router turns the link graph into schedules: one ring that keeps each host's ranks
// together (so a ring crosses the network once per host) and, once links are isolated
// (issue 22), uses none of them. Finding such a ring is a Hamiltonian cycle search; the
// graphs here are nearly complete (a few links out of use), where a depth-first search that
// tries the usual order first finds one at once, and proves that none exists where the
// hosts are few (3 hosts with one link out: only a relay can carry that pair's traffic).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "collectives/collective.hpp"
#include "src/base/peer_info.hpp"
#include "src/topology.hpp"

namespace weft {

/// Links between ranks taken out of use; a link has no direction.
class LinkSet {
 public:
  /// Whether the set changed.
  bool add(int a, int b) { return links_.insert(key(a, b)).second; }
  bool remove(int a, int b) { return links_.erase(key(a, b)) > 0; }
  bool has(int a, int b) const { return !links_.empty() && links_.contains(key(a, b)); }
  size_t size() const { return links_.size(); }
  /// Calls f(a, b), a < b, for every link, in no set order.
  template <typename F>
  void for_each(F f) const {
    for (uint64_t k : links_) f(static_cast<int>(k >> 32), static_cast<int>(k & 0xffffffffu));
  }

 private:
  static uint64_t key(int a, int b) {
    const auto lo = static_cast<uint32_t>(a < b ? a : b), hi = static_cast<uint32_t>(a < b ? b : a);
    return uint64_t{lo} << 32 | hi;
  }
  absl::flat_hash_set<uint64_t> links_;
};

/// Each host's ranks in rank order, the hosts in order of their lowest rank.
std::vector<std::vector<int>> ranks_by_host(const std::vector<PeerInfo>& peers);

struct RingSearch {
  /// Every rank once, each host's ranks together (where its own links allow: a host whose
  /// ranks cannot line up goes in pieces), no two neighbours (the last and the first
  /// included) joined by an isolated link; nullopt when none was found.
  std::optional<std::vector<int>> ring;
  /// How many pieces the hosts went in: hosts.size() when each host stayed together.
  size_t pieces = 0;
  /// With no ring: true when the search tried everything it could (no ring of that shape
  /// exists), false when it gave up at its step budget.
  bool exhausted = false;
};

/// Searches for a ring over `hosts` (as ranks_by_host gives them) that avoids `isolated`.
/// With nothing isolated it is the hosts in order, each host's ranks in rank order. Inside a
/// host it keeps one path (rank order, or the first one found around isolated links; pieces
/// where there is none) and varies only where the ring enters it (rotations and direction).
/// Where no such ring exists it tries each host's path in two halves (a host the ring must
/// pass twice), then every rank on its own.
RingSearch ring_avoiding(const std::vector<std::vector<int>>& hosts, const LinkSet& isolated,
                         uint64_t step_budget = 1'000'000);

}  // namespace weft
