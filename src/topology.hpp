// The link graph: for every pair of ranks, the transport that will carry their traffic.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/base/peer_info.hpp"
#include "transport/transport.hpp"

namespace weft {

class Topology {
 public:
  /// Picks, for every peer of `self`, the first viable transport in preference order
  /// (shm before tcp), or the one `forced` names ("auto" forces nothing). A forced transport
  /// that cannot reach a peer is an error naming both.
  static absl::StatusOr<Topology> build(int self, const std::vector<PeerInfo>& peers,
                                        const std::vector<transport::Transport*>& by_preference,
                                        const std::string& forced);

  /// The transport for links to `peer` (nullptr for self).
  transport::Transport* transport_to(int peer) const { return choice_[peer]; }
  const std::vector<PeerInfo>& peers() const { return peers_; }
  /// Whether the link to every peer (and there is one) goes over `transport`.
  bool every_link_over(std::string_view transport) const;
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

 private:
  std::vector<PeerInfo> peers_;
  std::vector<transport::Transport*> choice_;
  int local_rank_ = 0;
  int local_size_ = 1;
};

}  // namespace weft
