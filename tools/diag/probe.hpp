// `weft diag probe`'s measurement: every rank pair's latency and bandwidth, pair by pair in
// tournament rounds (schedule.hpp), over the whole link and over each of its rails alone,
// repeated; the results gathered on every rank and judged (outliers.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/diag/outliers.hpp"
#include "weft/weft.hpp"

namespace weft::tools::diag {

struct ProbeOptions {
  size_t message_bytes = size_t{4} << 20;  ///< one bandwidth transfer
  int pings = 50;                          ///< round trips per latency measurement
  int transfers = 3;                       ///< timed per bandwidth measurement: the fastest
  int repeats = 5;                         ///< of the whole schedule; most must agree
  bool rails = true;                       ///< also each rail of a multi-rail link alone
};

/// The whole job's measurements, the same on every rank.
struct ProbeResult {
  int ranks = 0;
  std::vector<std::string> hosts;  ///< by rank
  std::vector<std::string> paths;  ///< "link", then "rail 0 (eth0)", ... (Cell::path indexes)
  std::vector<Cell> cells;         ///< every measured direction of every pair and path
};

/// Called on rank 0 as the probe goes: a line of progress.
using ProbeProgress = std::function<void(const std::string& line)>;

/// Runs the probe; every rank of `comm` must call it with the same options.
absl::StatusOr<ProbeResult> run_probe(Communicator& comm, const ProbeOptions& options,
                                      const ProbeProgress& progress);

}  // namespace weft::tools::diag
