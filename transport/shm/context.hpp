// The shared-memory transport: links ranks of one host through rings in /dev/shm.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "transport/transport.hpp"

namespace weft::transport::shm {

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init);

}  // namespace weft::transport::shm
