// Every rank's JSON on every rank: how weft diag brings what each rank saw (its health
// scopes, its counters) to the rank that prints.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "weft/weft.hpp"

namespace weft::tools::diag {

/// All ranks call it; each gets every rank's `mine`, by rank.
absl::StatusOr<std::vector<nlohmann::json>> gather_json(Communicator& comm,
                                                        const nlohmann::json& mine);

}  // namespace weft::tools::diag
