// Counters of this rank's links, per link and per path (a tcp rail): what the transports
// observe themselves (stalls, errors, failed connects, bytes) and what the kernel knows of
// each tcp socket (TCP_INFO: retransmits, rtt). The link scope carries the sum over its
// rails, so a lossy rail shows on the link as well as on the rail.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "src/health/sample.hpp"
#include "transport/transport.hpp"

namespace weft::health {

/// One of the communicator's peers as the link source sees it: the open link (null when
/// none is open) and the connects to it that failed so far.
struct LinkView {
  int peer = -1;
  std::string_view transport;  ///< "shm", "tcp"
  const transport::Pair* pair = nullptr;
  uint64_t failed_connects = 0;
};
/// Calls `visit` for every peer with an open link or a failed connect, while keeping those
/// links alive (the communicator holds its link lock throughout).
using LinkWalker = std::function<void(absl::FunctionRef<void(const LinkView&)> visit)>;

class LinkSource : public Source {
 public:
  /// `rail_ifnames`: this rank's tcp rails in order (a rail scope is numbered by its place
  /// here, so an InfiniBand port maps to the same number).
  LinkSource(LinkWalker walk, std::vector<std::string> rail_ifnames)
      : walk_(std::move(walk)), rail_ifnames_(std::move(rail_ifnames)) {}

  std::string_view name() const override { return "link"; }
  void sample(absl::Time now, std::vector<Sample>& out) override;

 private:
  /// The rail number of the path named `ifname`: its place among the rails, else the number
  /// of rails plus `order` (its place on the link) for a path on no listed rail.
  int rail_of(std::string_view ifname, int order) const;

  LinkWalker walk_;
  std::vector<std::string> rail_ifnames_;
};

}  // namespace weft::health
