#include "src/router.hpp"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace weft {
namespace {

// One host as the ring may pass through it: a path over its ranks that uses no isolated
// link, and whether its ends are joined too (then the ring may enter it anywhere).
struct HostPath {
  std::vector<int> path;
  bool cyclic = false;
  size_t entries() const { return path.size() <= 1 ? 1 : (cyclic ? 2 * path.size() : 2); }
  // Entry e: rotation e / 2, reversed when e is odd.
  int at(size_t e, size_t i) const {
    const size_t m = path.size();
    const size_t start = cyclic ? e / 2 : ((e & 1U) != 0 ? m - 1 : 0);
    return (e & 1U) != 0 ? path[(start + m - i) % m] : path[(start + i) % m];
  }
  int first(size_t e) const { return at(e, 0); }
  int last(size_t e) const { return at(e, path.size() - 1); }
};

// A Hamiltonian path over `ranks` avoiding `isolated`, rank order first; hosts hold a few
// ranks, and a budget bounds the search all the same.
bool host_path(const std::vector<int>& ranks, const LinkSet& isolated, HostPath* out) {
  std::vector<int> path;
  std::vector<bool> used(ranks.size(), false);
  uint64_t steps = 0;
  auto extend = [&](auto&& self) -> bool {
    if (path.size() == ranks.size()) return true;
    for (size_t i = 0; i < ranks.size() && ++steps < 100'000; ++i) {
      if (used[i] || (!path.empty() && isolated.has(path.back(), ranks[i]))) continue;
      used[i] = true;
      path.push_back(ranks[i]);
      if (self(self)) return true;
      path.pop_back();
      used[i] = false;
    }
    return false;
  };
  if (!extend(extend)) return false;
  out->path = std::move(path);
  out->cyclic = out->path.size() > 2 && !isolated.has(out->path.back(), out->path.front());
  return true;
}

// A host whose ranks cannot line up around its isolated links (an isolated NVLink between
// its only two GPUs) enters the ring in pieces: paths that use no isolated link, each grown
// greedily from the lowest rank left. The ring then crosses the network more often, which
// beats no ring at all.
void split_host(const std::vector<int>& ranks, const LinkSet& isolated, std::vector<HostPath>& out) {
  std::vector<bool> used(ranks.size(), false);
  for (size_t start = 0; start < ranks.size(); ++start) {
    if (used[start]) continue;
    HostPath piece;
    piece.path.push_back(ranks[start]);
    used[start] = true;
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t i = 0; i < ranks.size() && !grew; ++i) {
        if (used[i] || isolated.has(piece.path.back(), ranks[i])) continue;
        used[i] = true;
        piece.path.push_back(ranks[i]);
        grew = true;
      }
    }
    piece.cyclic = piece.path.size() > 2 && !isolated.has(piece.path.back(), piece.path.front());
    out.push_back(std::move(piece));
  }
}

class HostOrderSearch {
 public:
  HostOrderSearch(const std::vector<HostPath>& hosts, const LinkSet& isolated, uint64_t budget)
      : hosts_(hosts), isolated_(isolated), budget_(budget), used_(hosts.size(), false) {}

  RingSearch run() {
    RingSearch out;
    // Host 0 (rank 0's) goes first: rings are the same turned around.
    used_[0] = true;
    for (size_t e = 0; e < hosts_[0].entries(); ++e) {
      order_.assign(1, {0, e});
      if (extend()) {
        out.ring.emplace();
        for (const auto& [h, entry] : order_) {
          for (size_t i = 0; i < hosts_[h].path.size(); ++i) {
            out.ring->push_back(hosts_[h].at(entry, i));
          }
        }
        return out;
      }
      if (steps_ >= budget_) return out;
    }
    out.exhausted = true;
    return out;
  }

 private:
  bool extend() {
    const auto [h, e] = order_.back();  // a copy: order_ grows below
    const int exit = hosts_[h].last(e);
    if (order_.size() == hosts_.size()) {
      const auto& [h0, e0] = order_.front();
      const int first = hosts_[h0].first(e0);
      return exit == first || !isolated_.has(exit, first);  // a ring of one rank has no link
    }
    for (size_t next = 1; next < hosts_.size(); ++next) {
      if (++steps_ >= budget_) return false;  // the scan costs too: thousands of pieces
      if (used_[next]) continue;
      for (size_t entry = 0; entry < hosts_[next].entries(); ++entry) {
        if (++steps_ >= budget_) return false;
        if (isolated_.has(exit, hosts_[next].first(entry))) continue;
        used_[next] = true;
        order_.push_back({next, entry});
        if (extend()) return true;
        order_.pop_back();
        used_[next] = false;
        if (steps_ >= budget_) return false;
      }
    }
    return false;
  }

  const std::vector<HostPath>& hosts_;
  const LinkSet& isolated_;
  const uint64_t budget_;
  uint64_t steps_ = 0;
  std::vector<bool> used_;
  std::vector<std::pair<size_t, size_t>> order_;  // host, entry
};

}  // namespace

std::vector<std::vector<int>> ranks_by_host(const std::vector<PeerInfo>& peers) {
  // Ranks in rank order: each host is first met at its lowest rank.
  std::vector<const PeerInfo*> by_rank;
  for (const PeerInfo& p : peers) by_rank.push_back(&p);
  std::sort(by_rank.begin(), by_rank.end(),
            [](const PeerInfo* a, const PeerInfo* b) { return a->rank < b->rank; });
  absl::flat_hash_map<std::string, size_t> index;
  std::vector<std::vector<int>> hosts;
  for (const PeerInfo* p : by_rank) {
    auto [it, fresh] = index.try_emplace(p->host_id, hosts.size());
    if (fresh) hosts.emplace_back();
    hosts[it->second].push_back(p->rank);
  }
  return hosts;
}

RingSearch ring_avoiding(const std::vector<std::vector<int>>& hosts, const LinkSet& isolated,
                         uint64_t step_budget) {
  if (hosts.empty()) return {std::vector<int>(), false};
  std::vector<HostPath> paths;
  for (const std::vector<int>& ranks : hosts) {
    HostPath p;
    if (host_path(ranks, isolated, &p)) {
      paths.push_back(std::move(p));
    } else {
      split_host(ranks, isolated, paths);
    }
  }
  RingSearch found = HostOrderSearch(paths, isolated, step_budget).run();
  found.pieces = paths.size();
  if (found.ring) return found;
  // A host the ring must pass twice (three hosts, every link between two of them isolated:
  // h1 h0 h2 h0) goes in two halves of its path: still few pieces, and each stays together.
  std::vector<HostPath> halves;
  for (const HostPath& p : paths) {
    if (p.path.size() < 2) {
      halves.push_back(p);
      continue;
    }
    const auto mid = p.path.begin() + static_cast<ptrdiff_t>(p.path.size() / 2);
    for (auto [from, to] : {std::pair{p.path.begin(), mid}, {mid, p.path.end()}}) {
      HostPath half{std::vector<int>(from, to), false};
      half.cyclic = half.path.size() > 2 && !isolated.has(half.path.back(), half.path.front());
      halves.push_back(std::move(half));
    }
  }
  if (halves.size() > paths.size()) {
    RingSearch halved = HostOrderSearch(halves, isolated, step_budget).run();
    halved.pieces = halves.size();
    if (halved.ring) return halved;
  }
  // Pieces of one host must not meet where their ranks' link is isolated, which may take
  // splitting the others too: then every rank is a piece of its own (a plain Hamiltonian
  // cycle), which finds a ring wherever one exists, at the cost of host locality.
  size_t ranks = 0;
  for (const auto& h : hosts) ranks += h.size();
  if (ranks == paths.size()) return found;
  std::vector<HostPath> singles;
  for (const auto& h : hosts) {
    for (int r : h) singles.push_back(HostPath{{r}, false});
  }
  RingSearch single = HostOrderSearch(singles, isolated, step_budget).run();
  single.pieces = singles.size();
  return single;
}

}  // namespace weft
