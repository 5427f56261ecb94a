// Reading a rank's health endpoint (src/health/endpoint.hpp), which listens on its host's
// loopback unless WEFT_HEALTH_ENDPOINT_ADDRESS says otherwise: directly (this host, or
// another whose endpoint listens where we can reach it), or from inside a network namespace
// for the virtual cluster's hosts (docs/CLUSTER.md), where each host is one.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weft::tools::health {

/// One rank's endpoint: host:port, from inside `netns` (empty: this process's namespace).
struct Endpoint {
  std::string netns;
  int port = 0;
  std::string host = "127.0.0.1";
  std::string name() const;  ///< "127.0.0.1:9400", "node7:9400" or "weft-vc-h1:9400"
};

/// GET `path` from `e`, bounded by `timeout`; the body on status 200.
absl::StatusOr<std::string> http_get(const Endpoint& e, const std::string& path,
                                     absl::Duration timeout);

}  // namespace weft::tools::health
