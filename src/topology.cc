#include "src/topology.hpp"

#include "absl/strings/str_cat.h"

namespace weft {

absl::StatusOr<Topology> Topology::build(int self, const std::vector<PeerInfo>& peers,
                                         const std::vector<transport::Transport*>& by_preference,
                                         const std::string& forced) {
  Topology t;
  t.peers_ = peers;
  t.choice_.assign(peers.size(), nullptr);
  const PeerInfo& me = peers[self];
  int local_rank = 0, local_size = 0;
  for (const PeerInfo& peer : peers) {
    if (peer.host_id == me.host_id) {
      ++local_size;
      if (peer.rank < self) ++local_rank;
    }
    if (peer.rank == self) continue;
    for (transport::Transport* candidate : by_preference) {
      if (forced != "auto" && candidate->name() != forced) continue;
      if (candidate->viable(me, peer)) {
        t.choice_[peer.rank] = candidate;
        break;
      }
    }
    if (t.choice_[peer.rank] == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", self, " has no transport to rank ", peer.rank, " (WEFT_TRANSPORT=", forced,
          "; shm needs both ranks on one host, tcp needs a reachable address)"));
    }
  }
  t.local_rank_ = local_rank;
  t.local_size_ = local_size;
  return t;
}

bool Topology::every_link_over(std::string_view transport) const {
  bool any = false;
  for (transport::Transport* t : choice_) {
    if (t == nullptr) continue;  // self
    if (t->name() != transport) return false;
    any = true;
  }
  return any;
}

}  // namespace weft
