// A rank's health over HTTP on 127.0.0.1 (WEFT_HEALTH_ENDPOINT): GET /health is the
// snapshot as JSON (json.hpp), GET /metrics the Prometheus text (prometheus.hpp), GET /route
// what the communicator did about it (its route epoch, ring and route changes). Served
// by cpp-httplib on a thread of its own; on loopback unless WEFT_HEALTH_ENDPOINT_ADDRESS
// says otherwise, since the states name the job's hosts and links and nothing here
// authenticates the reader.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "src/health/monitor.hpp"

namespace httplib {
class Server;
}

namespace weft::health {

class Endpoint {
 public:
  /// Listens on `address`:`port` (WEFT_HEALTH_ENDPOINT_ADDRESS, loopback by default) and
  /// serves `monitor` (which must outlive it); `route` (any thread) gives /route's JSON, or
  /// is null (/route: 404).
  static absl::StatusOr<std::unique_ptr<Endpoint>> start(const Monitor& monitor,
                                                         const std::string& address, int port,
                                                         std::function<std::string()> route);
  ~Endpoint();

  int port() const { return port_; }

 private:
  Endpoint() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace weft::health
