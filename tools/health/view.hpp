// weft health's picture of a running job, from every rank's endpoint: each rank's scopes
// (GET /health) and route (GET /route) in one JSON (weft.health/1), and the table that
// shows it: what is not HEALTHY and why, the route epoch and ring, the isolated links,
// every route change with its cost, and each link's counters.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace weft::tools::health {

/// What one endpoint answered: its /health and /route, or why it did not.
struct RankView {
  std::string endpoint;
  nlohmann::json health;  ///< null when it did not answer
  nlohmann::json route;   ///< null when it did not answer or has no route
  std::string error;
};

nlohmann::json job_json(const std::vector<RankView>& ranks, const std::string& time);
std::string job_table(const nlohmann::json& job);
/// 0 every scope HEALTHY, 1 one is not, 2 an endpoint did not answer.
int job_status(const nlohmann::json& job);

}  // namespace weft::tools::health
