// What one rank's health monitor saw while weft diag ran: every scope it watches, the worst
// state each reached (with the counter and threshold that decided it) and its counters, as
// JSON for gather_json.
#pragma once

#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "weft/weft.hpp"

namespace weft::tools::diag {

/// Drains the rank's state changes since the communicator started and reads its scopes.
/// `earlier`, if not null, is an earlier health(): each cumulative counter then also gets its
/// rate between the two readings ("rate_interval"), or "reset_in_interval" where it went down
/// (a cleared port counter).
nlohmann::json observe(Communicator& comm, const std::vector<LinkHealth>* earlier);

/// The scope fields of HealthScope as JSON.
nlohmann::json scope_json(const HealthScope& s);

}  // namespace weft::tools::diag
