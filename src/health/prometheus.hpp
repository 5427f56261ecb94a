// The monitor's states and counters in the Prometheus text exposition format (version
// 0.0.4), for the endpoint's /metrics: one gauge family for the states and one family per
// counter, each sample labelled with its rank and scope.
#pragma once

#include <string>
#include <vector>

#include "src/health/monitor.hpp"

namespace weft::health {

/// weft_health_state{rank="1",kind="rail",peer="2",rail="0",...} 2 (0 HEALTHY, 1 SUSPECT,
/// 2 FAILING), then weft_<counter>_total (cumulative) or weft_<counter> (gauge).
std::string prometheus_text(int rank, const std::vector<ScopeHealth>& scopes);

}  // namespace weft::health
