// What each rank tells the others at bootstrap: who it is, where it runs, and how each
// transport can reach it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace weft {

struct PeerInfo {
  int rank = -1;
  int32_t pid = 0;
  /// Identifies the host *and* network namespace: ranks with equal ids can share memory and
  /// loopback; virtual-cluster hosts (namespaces on one machine) count as different hosts.
  std::string host_id;
  /// (transport name, address) for every transport this rank listens on.
  std::vector<std::pair<std::string, std::string>> addresses;

  /// The address published for `transport`, or empty.
  std::string address_of(std::string_view transport) const;

  std::string encode() const;
  /// Bounds-checked: a truncated or oversized blob is an error, never a crash.
  static absl::StatusOr<PeerInfo> decode(std::string_view blob);
};

/// This process's host id: hostname, boot id and network-namespace inode.
std::string local_host_id();

}  // namespace weft
