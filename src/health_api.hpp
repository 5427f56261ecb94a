// The health monitor's states in the public API's terms (weft/health.hpp): the roof's
// translation, shared by the C++ Communicator and the C API.
#pragma once

#include <optional>
#include <vector>

#include "src/health/monitor.hpp"
#include "weft/health.hpp"

namespace weft::detail {

/// Every scope's health; empty when `monitor` is null (WEFT_HEALTH=off).
std::vector<LinkHealth> health_of(const health::Monitor* monitor);
/// The oldest change `monitor` has not handed out yet.
std::optional<HealthChange> next_change_of(health::Monitor* monitor);

}  // namespace weft::detail
