// weft diag topo: what the job runs on, as each rank sees it (its host, GPUs and their
// NVLinks, InfiniBand ports, rails) and, for every rank pair, the path weft uses and the
// bandwidth that path should give. The GPUs, NVLinks and ports are the health monitor's
// scopes (NVML, InfiniBand sysfs), so a fake of either shows here as it does in health.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "weft/weft.hpp"

namespace weft::tools::diag {

/// This rank's part, as JSON (its links must be open; the monitor must have read once).
absl::StatusOr<nlohmann::json> describe_rank(Communicator& comm);

/// Every rank's describe_rank(), by rank: the topology JSON (weft.diag.topo/1) with the pairs.
nlohmann::json topo_json(const std::vector<nlohmann::json>& ranks);
std::string topo_table(const nlohmann::json& topo);
/// Whether anything is down or degraded: an InfiniBand port not ACTIVE or below its best
/// width or speed, an NVLink down.
bool topo_degraded(const nlohmann::json& topo);

}  // namespace weft::tools::diag
