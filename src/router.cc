#include "src/router.hpp"

#include <algorithm>

namespace weft {

Schedule make_schedule(const Topology& topology) {
  const std::vector<PeerInfo>& peers = topology.peers();
  // Hosts in order of their lowest rank, ranks of one host in rank order.
  std::vector<int> first_rank_of_host(peers.size());
  for (const PeerInfo& p : peers) {
    int first = p.rank;
    for (const PeerInfo& q : peers) {
      if (q.host_id == p.host_id) first = std::min(first, q.rank);
    }
    first_rank_of_host[p.rank] = first;
  }
  std::vector<int> ring;
  for (const PeerInfo& p : peers) ring.push_back(p.rank);
  std::stable_sort(ring.begin(), ring.end(), [&](int a, int b) {
    return first_rank_of_host[a] < first_rank_of_host[b];
  });
  return Schedule(/*epoch=*/0, std::move(ring));
}

}  // namespace weft
