// Running weft diag's job subcommands (probe, health, counters, topo) once their flags are parsed
// (diag_command.cc): join the job, measure, gather, print on rank 0, leave together.
#pragma once

#include <string>

#include "tools/diag/outliers.hpp"
#include "tools/diag/probe.hpp"

namespace weft::tools::diag {

inline constexpr int kHealthy = 0, kDegraded = 1, kCannotRun = 2;

struct DiagFlags {
  ProbeOptions probe;
  OutlierOptions outliers;
  std::string bytes = "4M";
  bool json = false;
  std::string plot;       ///< probe: a PNG to draw
  bool no_probe = false;  ///< health: counters only
  double interval_s = 1;  ///< counters: the rate interval
};

int run_probe_command(const DiagFlags& flags, int argc, char** argv);
int run_health_command(const DiagFlags& flags, int argc, char** argv);
int run_counters_command(const DiagFlags& flags, int argc, char** argv);
int run_topo_command(const DiagFlags& flags, int argc, char** argv);

}  // namespace weft::tools::diag
