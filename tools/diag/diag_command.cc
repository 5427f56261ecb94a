// `weft diag`: which link is bad, how bad and why. Each subcommand prints a table, or JSON
// with --json (docs/DIAG.md), and exits 0 healthy, 1 degraded or failed, 2 could not run.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/cli.hpp"
#include "tools/commands.hpp"
#include "tools/diag/diag_run.hpp"

namespace weft::tools {
namespace {

using diag::DiagFlags;

// The probe's options, shared by probe and health (which probes first).
void add_probe_options(CLI::App& app, DiagFlags& f) {
  app.add_option("-b,--bytes", f.bytes, "bandwidth transfer size (K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-r,--repeats", f.probe.repeats, "times the whole schedule runs; most must agree")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--transfers", f.probe.transfers,
                 "timed transfers per bandwidth measurement; the fastest counts")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--pings", f.probe.pings, "round trips per latency measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--threshold", f.outliers.threshold,
                 "slow below this share of the class median bandwidth")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 0.99));
  app.add_flag("--no-rails", [&f](int64_t) { f.probe.rails = false; },
               "measure each link as a whole only, not each rail alone");
}

void add_probe(CLI::App& diag, DiagFlags& f) {
  CLI::App* probe = diag.add_subcommand(
      "probe", "every rank pair's latency and bandwidth; flags the slow ones (under mpirun)");
  probe->footer(
      "Measures every rank pair's latency and bandwidth, each direction, over the link and\n"
      "over each of its rails alone, pair by pair in tournament rounds (no rank in two pairs\n"
      "at once), and flags the pairs and rails well below the median of their class (same\n"
      "transport; link or single rail) in most repeats. Launch it on the job's ranks:\n"
      "  mpirun -np N weft diag probe\n"
      "  cluster/vcluster mpirun -np 4 -- weft diag probe --plot probe.png\n"
      "Isolation is off while it runs (WEFT_ISOLATE): a link that health would take out of\n"
      "use is what the probe looks for. Exit status: 0 nothing flagged, 1 flagged, 2 could\n"
      "not run.");
  add_probe_options(*probe, f);
  probe->add_flag("--json", f.json, "print JSON (schema weft.diag.probe/1) instead of the table");
  probe->add_option("--plot", f.plot, "also draw the bandwidth matrices as heat maps into FILE.png")
      ->type_name("FILE.png");
}

void add_health(CLI::App& diag, DiagFlags& f) {
  CLI::App* health = diag.add_subcommand(
      "health", "the verdict per link, rail, GPU, NVLink and port, from probe and counters");
  health->footer(
      "Probes every pair (as weft diag probe) while each rank's health monitor reads its\n"
      "counters (tcp retransmits, NVML ECC and NVLink errors, InfiniBand port counters,\n"
      "stalls), then gives each link, rail, GPU, NVLink and InfiniBand port of the job one\n"
      "state, HEALTHY, SUSPECT or FAILING, with the counter or measurement and the threshold\n"
      "that decided it (docs/HEALTH.md has the rules). Launch it on the job's ranks:\n"
      "  mpirun -np N weft diag health\n"
      "Exit status: 0 every scope HEALTHY, 1 any SUSPECT or FAILING, 2 could not run.");
  add_probe_options(*health, f);
  health->add_flag("--no-probe", f.no_probe, "judge the counters alone (a few seconds)");
  health->add_flag("--json", f.json, "print JSON (schema weft.diag.health/1) instead of the table");
}

void add_counters(CLI::App& diag, DiagFlags& f) {
  CLI::App* counters = diag.add_subcommand(
      "counters", "every counter the health sources read, as values and rates");
  counters->footer(
      "Reads every counter each rank's health monitor reads (NVML, InfiniBand sysfs, each\n"
      "link's transport and TCP_INFO) twice, --interval apart, and prints the values and the\n"
      "rates between. Each link is used once first (a 4 KiB exchange), as links show their\n"
      "counters once used. Launch it on the job's ranks (mpirun -np N weft diag counters), or\n"
      "alone for this host's GPUs and ports.");
  counters->add_option("-i,--interval", f.interval_s, "seconds between the two readings")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  counters->add_flag("--json", f.json, "print JSON (schema weft.diag.counters/1)");
}

void add_topo(CLI::App& diag, DiagFlags& f) {
  CLI::App* topo = diag.add_subcommand(
      "topo", "ranks, hosts, GPUs and NVLinks, InfiniBand ports, rails, and each pair's path");
  topo->footer(
      "Each rank's host, its GPUs and their NVLinks (NVML: the far end's bus id and the rank\n"
      "that uses it), its InfiniBand ports with state, width and speed (sysfs), its rails\n"
      "with their speed, and for every rank pair the path weft uses (shm, or tcp over which\n"
      "rails) and the bandwidth that path should carry (the slower end's port or interface\n"
      "speed, summed over rails). Launch it on the job's ranks: mpirun -np N weft diag topo.\n"
      "Exit status: 0 every port and NVLink up at its best, 1 one is down or degraded, 2\n"
      "could not run.");
  topo->add_flag("--json", f.json, "print JSON (schema weft.diag.topo/1)");
}

}  // namespace

int diag_command(int argc, char** argv) {
  CLI::App diag("Which link is bad, how bad and why. Exit status: 0 healthy, 1 degraded or "
                "failed, 2 could not run.",
                "weft diag");
  diag.require_subcommand(1, 1);
  DiagFlags probe, health, counters, topo;
  add_topo(diag, topo);
  add_probe(diag, probe);
  add_counters(diag, counters);
  add_health(diag, health);
  if (argc < 2) {
    std::fprintf(stderr, "weft diag: name a subcommand\n\n%s", diag.help().c_str());
    return diag::kCannotRun;
  }
  if (auto rc = parse_args(diag, argc, argv)) return *rc;
  if (diag.got_subcommand("probe")) return diag::run_probe_command(probe, argc, argv);
  if (diag.got_subcommand("health")) return diag::run_health_command(health, argc, argv);
  if (diag.got_subcommand("counters")) return diag::run_counters_command(counters, argc, argv);
  if (diag.got_subcommand("topo")) return diag::run_topo_command(topo, argc, argv);
  return diag::kCannotRun;
}

}  // namespace weft::tools
