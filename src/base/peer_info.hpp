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
  /// The PCI bus id of the GPU this rank uses ("0000:18:00.0"; empty: none), so that peers
  /// map an NVLink's far end, which NVML names by bus id, to a rank.
  std::string gpu_bus_id;
  /// The InfiniBand port ("mlx5_0/1"; empty: none) that carries each of this rank's tcp
  /// rails, in rail order, so that peers map a port's counters to the links over it.
  std::vector<std::string> rail_ports;

  /// The address published for `transport`, or empty.
  std::string address_of(std::string_view transport) const;

  std::string encode() const;
  /// Bounds-checked: a truncated or oversized blob is an error, never a crash.
  static absl::StatusOr<PeerInfo> decode(std::string_view blob);
};

/// This process's host id: "hostname/boot id/net ns/ipc ns/pid ns".
std::string local_host_id();

/// The machine part of a host id (its kernel's boot id): ranks with equal machine ids share
/// the same cores even when they sit in different namespaces, as virtual-cluster hosts do.
std::string_view machine_of(std::string_view host_id);

}  // namespace weft
