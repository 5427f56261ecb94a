// weft diag health's verdict: every link, rail, GPU, NVLink and InfiniBand port of the job,
// HEALTHY / SUSPECT / FAILING, with the evidence that decided it: the counters each rank's
// health monitor judged (observe.hpp) and the pairs the probe flagged (outliers.hpp). Both
// ends of a link judge it; the worst of the two is its state.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "src/health/policy.hpp"
#include "tools/diag/probe_report.hpp"

namespace weft::tools::diag {

struct Verdict {
  std::string scope;            ///< job-wide name: "link 0-3 (h0-h3)", "rail 1 (weft-r1) of link 0-3 (h0-h3)"
  std::string kind;             ///< link, rail, gpu, nvlink, ib_port
  std::vector<int> ranks;       ///< the link's two ends, or the one rank
  int rail = -1;
  std::string state = "HEALTHY";
  nlohmann::json evidence = nlohmann::json::array();  ///< what made it so, from each source
};

/// `ranks_seen`: observe() of every rank, by rank. A counter that `policy` judges as a
/// ratio (tcp_retransmits per tcp_segments_sent) is judged here over the whole run, from
/// its final values, with the rule's thresholds, not by the monitor's worst window: the
/// probe's bursts make a healthy link's retransmits come in clumps that one window can
/// catch, where a lossy link's share stays high over the whole run.
std::vector<Verdict> judge_job(const std::vector<nlohmann::json>& ranks_seen,
                               const ProbeReport* probe, const health::Policy& policy);

std::string health_table(const std::vector<Verdict>& verdicts, const ProbeReport* probe);
/// `ranks_seen` goes in as "ranks": every scope and counter each rank read.
nlohmann::json health_json(const std::vector<Verdict>& verdicts, const ProbeReport* probe,
                           const std::vector<nlohmann::json>& ranks_seen);

/// Whether any verdict is worse than HEALTHY.
bool degraded(const std::vector<Verdict>& verdicts);

}  // namespace weft::tools::diag
