// `weft diag`: which link is bad, how bad and why. Each subcommand prints a table, or JSON
// with --json (docs/DIAG.md), and exits 0 healthy, 1 degraded or failed, 2 could not run.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>

#include "src/base/env.hpp"
#include "tools/commands.hpp"
#include "tools/diag/outliers.hpp"
#include "tools/diag/probe.hpp"
#include "tools/diag/probe_report.hpp"
#include "tools/diag/script.hpp"
#include "tools/job.hpp"
#include "tools/sweep.hpp"

namespace weft::tools {
namespace {

constexpr int kHealthy = 0, kDegraded = 1, kCannotRun = 2;

struct ProbeFlags {
  diag::ProbeOptions probe;
  diag::OutlierOptions outliers;
  std::string bytes = "4M";
  bool json = false;
  std::string plot;
};

void add_probe(CLI::App& diag, ProbeFlags& f) {
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
  probe->add_option("-b,--bytes", f.bytes, "bandwidth transfer size (K, M, G suffixes)")
      ->capture_default_str();
  probe->add_option("-r,--repeats", f.probe.repeats, "times the whole schedule runs")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  probe->add_option("--pings", f.probe.pings, "round trips per latency measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  probe->add_option("--transfers", f.probe.transfers,
                    "timed transfers per bandwidth measurement; the fastest counts")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  probe->add_option("--threshold", f.outliers.threshold,
                    "slow below this share of the class median bandwidth")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 0.99));
  probe->add_flag("--no-rails", [&f](int64_t) { f.probe.rails = false; },
                  "measure each link as a whole only, not each rail alone");
  probe->add_flag("--json", f.json, "print JSON (schema weft.diag.probe/1) instead of the table");
  probe->add_option("--plot", f.plot, "also draw the bandwidth matrices as heat maps into FILE.png")
      ->type_name("FILE.png");
}

int run_probe_command(const ProbeFlags& flags, int argc, char** argv) {
  ProbeFlags f = flags;
  if (!parse_bytes(f.bytes.c_str(), &f.probe.message_bytes) || f.probe.message_bytes == 0) {
    std::fprintf(stderr, "weft diag probe: bad --bytes '%s': a size such as 64K, 4M or 1G\n",
                 f.bytes.c_str());
    return kCannotRun;
  }
  // The probe measures links as they are: isolation would detour the bad one it looks for,
  // and the health monitor's log would interleave with the table (diag health reads both).
  setenv(env::kIsolate.name, "off", 1);
  setenv(env::kHealth.name, "off", 1);
  auto job = join_job(&argc, &argv);
  if (!job.ok()) {
    std::fprintf(stderr, "weft diag probe: cannot join the job: %s\n",
                 job.status().ToString().c_str());
    return leave_job(nullptr, kCannotRun);
  }
  const int rank = job->comm->rank();
  if (job->comm->size() < 2) {
    std::fprintf(stderr, "weft diag probe: one rank has no pairs; launch 2 or more "
                         "(mpirun -np N weft diag probe)\n");
    return leave_job(&*job, kCannotRun);
  }
  auto result = diag::run_probe(*job->comm, f.probe, [&f](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  });
  if (!result.ok()) {
    std::fprintf(stderr, "weft diag probe: rank %d: %s\n", rank, result.status().ToString().c_str());
    return leave_job(&*job, kCannotRun);
  }
  diag::ProbeReport report{*std::move(result), f.probe, f.outliers, {}};
  report.unjudged_classes = diag::judge(report.result.cells, f.outliers);
  int verdict = report.flagged_cells() > 0 ? kDegraded : kHealthy;
  if (rank == 0) {
    const nlohmann::json j = diag::probe_json(report);
    std::fputs(f.json ? (j.dump(2) + "\n").c_str() : diag::probe_table(report).c_str(), stdout);
    std::fflush(stdout);
    if (!f.plot.empty()) {
      const std::string data = f.plot + ".json";
      std::ofstream(data) << j.dump() << "\n";
      if (absl::Status s = run_script("plot-probe", {data, "-o", f.plot}); !s.ok()) {
        std::fprintf(stderr, "weft diag probe: no plot: %s\n", std::string(s.message()).c_str());
        verdict = kCannotRun;
      }
      std::remove(data.c_str());
    }
  }
  // Every rank leaves together, once rank 0 has printed and drawn: a rank that left earlier
  // would close links the others still acknowledge on.
  if (absl::Status s = job->comm->barrier(); !s.ok()) {
    std::fprintf(stderr, "weft diag probe: rank %d: %s\n", rank, s.ToString().c_str());
    return leave_job(&*job, kCannotRun);
  }
  return leave_job(&*job, verdict);
}

}  // namespace

int diag_command(int argc, char** argv) {
  CLI::App diag("Which link is bad, how bad and why. Exit status: 0 healthy, 1 degraded or "
                "failed, 2 could not run.",
                "weft diag");
  diag.require_subcommand(1, 1);
  ProbeFlags probe;
  add_probe(diag, probe);
  diag.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("weft diag: ") + e.what() + " (try weft diag --help, or weft diag SUBCOMMAND --help)\n";
  });
  if (argc < 2) {
    std::fprintf(stderr, "weft diag: name a subcommand\n\n%s", diag.help().c_str());
    return kCannotRun;
  }
  try {
    diag.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = diag.exit(e);
    return rc == 0 ? 0 : kCannotRun;
  }
  if (diag.got_subcommand("probe")) return run_probe_command(probe, argc, argv);
  return kCannotRun;
}

}  // namespace weft::tools
