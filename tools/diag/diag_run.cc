#include "tools/diag/diag_run.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/base/env.hpp"
#include "src/comm.hpp"
#include "tools/diag/gather.hpp"
#include "tools/diag/observe.hpp"
#include "tools/diag/probe_report.hpp"
#include "tools/diag/script.hpp"
#include "tools/diag/topo.hpp"
#include "tools/diag/verdict.hpp"
#include "tools/job.hpp"
#include "tools/sweep.hpp"

namespace weft::tools::diag {
namespace {

// A joined job for one subcommand: its name for messages, and every way out.
class DiagJob {
 public:
  explicit DiagJob(const char* name) : name_(name) {}

  // Joins with isolation off: a link that health would detour is what diag looks for.
  // `health`: the monitor runs, its log off (diag prints what it judged); else no monitor.
  bool join(int argc, char** argv, bool health) {
    setenv(env::kIsolate.name, "off", 1);
    setenv(env::kHealth.name, health ? "on" : "off", 1);
    if (health) setenv(env::kHealthLog.name, "off", 1);
    auto job = join_job(&argc, &argv);
    if (!job.ok()) {
      std::fprintf(stderr, "weft diag %s: cannot join the job: %s\n", name_,
                   job.status().ToString().c_str());
      return false;
    }
    job_ = *std::move(job);
    return true;
  }
  Communicator& comm() { return *job_->comm; }
  bool printer() const { return job_->comm->rank() == 0; }

  int failed(const absl::Status& s) {
    std::fprintf(stderr, "weft diag %s: rank %d: %s\n", name_, job_ ? job_->comm->rank() : -1,
                 s.ToString().c_str());
    return leave(kCannotRun);
  }
  // Every rank leaves together, once rank 0 has printed: a rank that left earlier would
  // close links the others still acknowledge on.
  int leave(int rc) {
    if (!job_) return leave_job(nullptr, rc);
    if (rc != kCannotRun) {
      if (absl::Status s = job_->comm->barrier(); !s.ok()) return failed(s);
    }
    return leave_job(&*job_, rc);
  }

 private:
  const char* name_;
  std::optional<Job> job_;
};

// Between two readings of the health monitor (WEFT_HEALTH_INTERVAL_MS).
absl::Duration monitor_interval() {
  return absl::Milliseconds(std::max(1, std::atoi(env_value(env::kHealthIntervalMs).c_str())));
}

bool parse_probe_bytes(const char* command, DiagFlags& f) {
  if (parse_bytes(f.bytes.c_str(), &f.probe.message_bytes) && f.probe.message_bytes > 0) {
    return true;
  }
  std::fprintf(stderr, "weft diag %s: bad --bytes '%s': a size such as 64K, 4M or 1G\n", command,
               f.bytes.c_str());
  return false;
}

absl::StatusOr<ProbeReport> probe(Communicator& comm, const DiagFlags& f) {
  auto result = run_probe(comm, f.probe, [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
  });
  if (!result.ok()) return result.status();
  ProbeReport report{*std::move(result), f.probe, f.outliers, {}};
  report.unjudged_classes = judge(report.result.cells, f.outliers);
  return report;
}

}  // namespace

int run_probe_command(const DiagFlags& flags, int argc, char** argv) {
  DiagFlags f = flags;
  if (!parse_probe_bytes("probe", f)) return kCannotRun;
  DiagJob job("probe");
  if (!job.join(argc, argv, /*health=*/false)) return job.leave(kCannotRun);
  if (job.comm().size() < 2) {
    std::fprintf(stderr, "weft diag probe: one rank has no pairs; launch 2 or more "
                         "(mpirun -np N weft diag probe)\n");
    return job.leave(kCannotRun);
  }
  auto report = probe(job.comm(), f);
  if (!report.ok()) return job.failed(report.status());
  int rc = report->flagged_cells() > 0 ? kDegraded : kHealthy;
  if (job.printer()) {
    const nlohmann::json j = probe_json(*report);
    std::fputs(f.json ? (j.dump(2) + "\n").c_str() : probe_table(*report).c_str(), stdout);
    std::fflush(stdout);
    if (!f.plot.empty()) {
      const std::string data = f.plot + ".json";
      std::ofstream(data) << j.dump() << "\n";
      if (absl::Status s = run_script("plot-probe", {data, "-o", f.plot}); !s.ok()) {
        std::fprintf(stderr, "weft diag probe: no plot: %s\n", std::string(s.message()).c_str());
        rc = kCannotRun;
      }
      std::remove(data.c_str());
    }
  }
  return job.leave(rc);
}

int run_health_command(const DiagFlags& flags, int argc, char** argv) {
  DiagFlags f = flags;
  if (!parse_probe_bytes("health", f)) return kCannotRun;
  DiagJob job("health");
  if (!job.join(argc, argv, /*health=*/true)) return job.leave(kCannotRun);
  std::optional<ProbeReport> report;
  if (!f.no_probe && job.comm().size() > 1) {
    auto r = probe(job.comm(), f);
    if (!r.ok()) return job.failed(r.status());
    report = *std::move(r);
  }
  // The monitor's last readings of the probe's traffic.
  absl::SleepFor(std::max(absl::Seconds(1), 3 * monitor_interval()));
  auto seen = gather_json(job.comm(), observe(job.comm(), nullptr));
  if (!seen.ok()) return job.failed(seen.status());
  auto policy = health::Policy::from_config(job.comm().impl().config());
  if (!policy.ok()) return job.failed(policy.status());
  const std::vector<Verdict> verdicts = judge_job(*seen, report ? &*report : nullptr, *policy);
  if (job.printer()) {
    std::fputs(f.json ? (health_json(verdicts, report ? &*report : nullptr, *seen).dump(2) + "\n").c_str()
                      : health_table(verdicts, report ? &*report : nullptr).c_str(),
               stdout);
  }
  return job.leave(degraded(verdicts) ? kDegraded : kHealthy);
}

// Opens every link with one small exchange over each (in tournament rounds, as the probe
// does), for what shows only once links are used (their counters, their rails), and waits
// for the monitor's next reading.
absl::Status touch_every_link(Communicator& comm) {
  if (comm.size() > 1) {
    ProbeOptions touch;
    touch.message_bytes = 4096, touch.pings = 1, touch.transfers = 1, touch.repeats = 1;
    touch.rails = false;
    if (auto r = run_probe(comm, touch, nullptr); !r.ok()) return r.status();
  }
  absl::SleepFor(2 * monitor_interval());
  return absl::OkStatus();
}

int run_topo_command(const DiagFlags& f, int argc, char** argv) {
  DiagJob job("topo");
  if (!job.join(argc, argv, /*health=*/true)) return job.leave(kCannotRun);
  if (absl::Status s = touch_every_link(job.comm()); !s.ok()) return job.failed(s);
  auto mine = describe_rank(job.comm());
  if (!mine.ok()) return job.failed(mine.status());
  auto all = gather_json(job.comm(), *mine);
  if (!all.ok()) return job.failed(all.status());
  const nlohmann::json topo = topo_json(*all);
  if (job.printer()) {
    std::fputs(f.json ? (topo.dump(2) + "\n").c_str() : topo_table(topo).c_str(), stdout);
  }
  return job.leave(topo_degraded(topo) ? kDegraded : kHealthy);
}

int run_counters_command(const DiagFlags& flags, int argc, char** argv) {
  DiagFlags f = flags;
  DiagJob job("counters");
  if (!job.join(argc, argv, /*health=*/true)) return job.leave(kCannotRun);
  if (absl::Status s = touch_every_link(job.comm()); !s.ok()) return job.failed(s);
  const std::vector<LinkHealth> before = job.comm().health();
  absl::SleepFor(absl::Seconds(f.interval_s));
  // The monitor reads on its own ticks: a short interval may still see the same reading, which
  // gives no rate. Its next one comes within WEFT_HEALTH_INTERVAL_MS (at most a minute; a
  // second is waited for here).
  const auto newest = [](const std::vector<LinkHealth>& all) {
    absl::Time t = absl::InfinitePast();
    for (const LinkHealth& h : all) t = std::max(t, h.read);
    return t;
  };
  for (int i = 0; i < 100 && newest(job.comm().health()) <= newest(before); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  auto seen = gather_json(job.comm(), observe(job.comm(), &before));
  if (!seen.ok()) return job.failed(seen.status());
  if (job.printer()) {
    nlohmann::json j = {{"schema", "weft.diag.counters/1"}, {"interval_s", f.interval_s},
                        {"ranks", *seen}};
    if (f.json) {
      std::fputs((j.dump(2) + "\n").c_str(), stdout);
    } else {
      for (const nlohmann::json& rank : *seen) {
        std::printf("# rank %d: counters over %.1f s (rate: per second over that interval)\n",
                    rank.value("rank", -1), f.interval_s);
        std::printf("%-34s %-34s %16s %12s\n", "scope", "counter", "value", "rate/s");
        for (const nlohmann::json& s : rank["scopes"]) {
          for (const nlohmann::json& c : s["counters"]) {
            const std::string rate =
                c.contains("rate_interval")
                    ? absl::StrFormat("%.4g", c["rate_interval"].get<double>())
                    : c.value("cumulative", false) ? "-" : "level";
            std::printf("%-34s %-34s %16.10g %12s\n", s.value("name", "").c_str(),
                        c.value("name", "").c_str(), c.value("value", 0.0), rate.c_str());
          }
        }
      }
    }
  }
  return job.leave(kHealthy);
}

}  // namespace weft::tools::diag
