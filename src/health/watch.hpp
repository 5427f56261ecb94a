// One communicator's health watch: its counter sources, the monitor thread that judges them,
// the JSON log and the HTTP endpoint, set up as WEFT_HEALTH_* say. Built in two steps around
// the bootstrap: open() before it (the devices this rank publishes in its PeerInfo, so peers
// can map an NVLink or a port to a rank), start() after it (once the peers are known).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/base/env.hpp"
#include "src/base/peer_info.hpp"
#include "src/health/change_log.hpp"
#include "src/health/endpoint.hpp"
#include "src/health/link_source.hpp"
#include "src/health/monitor.hpp"

namespace weft::health {

class NvmlSource;
class IbSource;

class Watch {
 public:
  /// Opens the device sources. A missing NVML library or InfiniBand tree is no error (there
  /// is nothing to watch); a bad setting is. `local_rank` picks this rank's GPU among the
  /// host's (local rank modulo their count); `rail_ifnames` are its tcp rails in order.
  static absl::StatusOr<std::unique_ptr<Watch>> open(const Config& config, int rank,
                                                     int local_rank,
                                                     std::vector<std::string> rail_ifnames);
  ~Watch();

  /// Adds what this rank publishes about its devices: its GPU's bus id, its rails' ports.
  void describe_self(PeerInfo& self) const;

  /// Starts the monitor (and the log and endpoint) once `peers` (indexed by rank) are known.
  /// `walk` visits the communicator's links (link_source.hpp); `also`, when set, hears every
  /// change after the log (on the monitor's thread, or the caller's of Monitor::record).
  /// `route`, when set, is what the endpoint serves at /route (endpoint.hpp).
  absl::Status start(const std::vector<PeerInfo>& peers, LinkWalker walk,
                     std::function<void(const Change&)> also = nullptr,
                     std::function<std::string()> route = nullptr);

  Monitor* monitor() { return monitor_.get(); }
  const Monitor* monitor() const { return monitor_.get(); }
  /// The endpoint's port, or 0 without one.
  int endpoint_port() const { return endpoint_ ? endpoint_->port() : 0; }

 private:
  Watch() = default;

  Config config_;
  int rank_ = 0;
  int local_rank_ = 0;
  std::vector<std::string> rail_ifnames_;
  std::unique_ptr<NvmlSource> nvml_;  // null: no NVML
  int gpu_ = -1;                      // NVML index of this rank's GPU
  std::unique_ptr<IbSource> ib_;
  std::unique_ptr<ChangeLog> log_;
  std::unique_ptr<Monitor> monitor_;
  std::unique_ptr<Endpoint> endpoint_;  // declared last: stops first, before the monitor
};

}  // namespace weft::health
