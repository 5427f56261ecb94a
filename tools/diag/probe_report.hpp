// What `weft diag probe` prints: the matrices and flagged links as a table for people, or
// as JSON for scripts (schema: docs/DIAG.md, "weft.diag.probe/1").
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "tools/diag/outliers.hpp"
#include "tools/diag/probe.hpp"

namespace weft::tools::diag {

/// A judged probe and how it was run.
struct ProbeReport {
  ProbeResult result;  ///< cells judged
  ProbeOptions options;
  OutlierOptions outliers;
  std::vector<std::string> unjudged_classes;  ///< too few cells to compare
  int flagged_cells() const;
};

std::string probe_table(const ProbeReport& report);
nlohmann::json probe_json(const ProbeReport& report);

}  // namespace weft::tools::diag
