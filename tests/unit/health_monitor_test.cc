// The monitor over a scripted source: it judges every scope, queues each change once, hands
// it to the log, and shows the same states as JSON and as Prometheus text.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/health/json.hpp"
#include "src/health/monitor.hpp"
#include "src/health/prometheus.hpp"

namespace weft::health {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

// A source whose next readings the test sets: counter values per scope.
class ScriptedSource : public Source {
 public:
  struct Shared {
    std::map<Scope, std::vector<Counter>> values;
    std::atomic<int> samples{0};
  };
  explicit ScriptedSource(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  std::string_view name() const override { return "scripted"; }
  void sample(absl::Time now, std::vector<Sample>& out) override {
    ++shared_->samples;
    for (const auto& [scope, counters] : shared_->values) out.push_back({scope, now, counters});
  }

 private:
  std::shared_ptr<Shared> shared_;
};

const Scope kRail{.kind = ScopeKind::kRail, .peer = 1, .rail = 0, .device = "weft-r0"};
const Scope kGpu{.kind = ScopeKind::kGpu, .gpu = 0, .device = "0000:18:00.0"};

struct Fixture {
  std::shared_ptr<ScriptedSource::Shared> shared = std::make_shared<ScriptedSource::Shared>();
  std::vector<Change> logged;
  std::unique_ptr<Monitor> monitor;

  Fixture() {
    Monitor::Options o;
    o.rank = 3;
    // tcp_retransmits by rate (suspect 1/s, failing 20/s) rather than as a share of segments.
    EXPECT_TRUE(o.policy.apply_overrides("").ok());
    o.policy.rules.front() = Rule{"tcp_retransmits", Measure::kRate, 1, 20};
    o.on_change = [this](const Change& c) { logged.push_back(c); };
    std::vector<std::unique_ptr<Source>> sources;
    sources.push_back(std::make_unique<ScriptedSource>(shared));
    monitor = std::make_unique<Monitor>(std::move(o), std::move(sources));
  }
  void set(const Scope& s, const char* counter, double v,
           CounterKind kind = CounterKind::kCumulative) {
    auto& cs = shared->values[s];
    for (Counter& c : cs) {
      if (c.name == counter) {
        c.value = v;
        return;
      }
    }
    cs.push_back({counter, v, kind});
  }
};

TEST(HealthMonitor, JudgesEachScopeAndQueuesEachChangeOnce) {
  Fixture f;
  f.set(kRail, "tcp_retransmits", 0);
  f.set(kGpu, "ecc_uncorrected", 0);
  f.monitor->sample_now(kStart);
  EXPECT_FALSE(f.monitor->next_change());
  f.set(kRail, "tcp_retransmits", 300);
  f.set(kGpu, "ecc_uncorrected", 1);
  f.monitor->sample_now(kStart + absl::Seconds(1));
  std::map<ScopeKind, Change> changes;
  while (auto c = f.monitor->next_change()) changes[c->scope.kind] = *c;
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[ScopeKind::kRail].to, State::kFailing);
  EXPECT_EQ(changes[ScopeKind::kRail].reason.counter, "tcp_retransmits");
  EXPECT_EQ(changes[ScopeKind::kGpu].to, State::kFailing);
  EXPECT_EQ(changes[ScopeKind::kGpu].reason.counter, "ecc_uncorrected");
  EXPECT_EQ(f.logged.size(), 2u);
  const auto snapshot = f.monitor->snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  for (const ScopeHealth& s : snapshot) EXPECT_EQ(s.state, State::kFailing);
}

TEST(HealthMonitor, DropsTheOldestChangesNobodyTakes) {
  Fixture f;
  f.set(kGpu, "nvlink_down", 0, CounterKind::kGauge);
  Monitor::Options o;
  o.policy.recover = absl::ZeroDuration();
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<ScriptedSource>(f.shared));
  Monitor m(std::move(o), std::move(sources));
  const int flips = static_cast<int>(Monitor::kMaxQueuedChanges) + 10;
  for (int i = 0; i <= flips; ++i) {
    f.set(kGpu, "nvlink_down", i % 2, CounterKind::kGauge);
    m.sample_now(kStart + absl::Seconds(i));
  }
  EXPECT_EQ(m.dropped_changes(), 10u);
  auto first = m.next_change();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->time, kStart + absl::Seconds(11));
}

TEST(HealthMonitor, ThreadReadsAtItsIntervalAndStopsPromptly) {
  auto shared = std::make_shared<ScriptedSource::Shared>();
  Monitor::Options o;
  o.interval = absl::Milliseconds(10);
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<ScriptedSource>(shared));
  const absl::Time begin = absl::Now();
  {
    Monitor m(std::move(o), std::move(sources));
    m.start();
    for (int i = 0; i < 500 && shared->samples < 5; ++i) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GE(shared->samples, 5);
  EXPECT_LT(absl::Now() - begin, absl::Seconds(5));
}

TEST(HealthJson, ChangeLineHasEveryField) {
  Fixture f;
  f.set(kRail, "tcp_retransmits", 0);
  f.monitor->sample_now(kStart);
  f.set(kRail, "tcp_retransmits", 300);
  f.monitor->sample_now(kStart + absl::Seconds(2));
  ASSERT_EQ(f.logged.size(), 1u);
  const std::string line = change_json_line(3, f.logged[0]);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["event"], "weft_health_change");
  EXPECT_EQ(j["time"], "2027-01-15T08:00:02.000Z");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["scope"], "rail 0 (weft-r0) to rank 1");
  EXPECT_EQ(j["kind"], "rail");
  EXPECT_EQ(j["peer"], 1);
  EXPECT_EQ(j["counter"], "tcp_retransmits");
  EXPECT_EQ(j["value"], 300);
  EXPECT_EQ(j["rate"], 150);
  EXPECT_EQ(j["threshold"], 20);
  EXPECT_EQ(j["window_s"], 5);
  EXPECT_EQ(j["from"], "HEALTHY");
  EXPECT_EQ(j["to"], "FAILING");
}

TEST(HealthJson, SnapshotListsStatesAndCounters) {
  Fixture f;
  f.set(kGpu, "ecc_uncorrected", 0);
  f.set(kGpu, "xid_79", 0);
  f.monitor->sample_now(kStart);
  f.set(kGpu, "xid_79", 1);
  f.monitor->sample_now(kStart + absl::Seconds(1));
  const auto j = nlohmann::json::parse(health_json(3, f.monitor->snapshot(), kStart));
  ASSERT_EQ(j["scopes"].size(), 1u);
  const auto& gpu = j["scopes"][0];
  EXPECT_EQ(gpu["state"], "FAILING");
  EXPECT_EQ(gpu["reason"]["counter"], "xid_79");
  EXPECT_EQ(gpu["counters"]["xid_79"]["value"], 1);
  EXPECT_EQ(gpu["device"], "0000:18:00.0");
}

TEST(HealthPrometheus, OneFamilyPerCounterWithTypeAndLabels) {
  Fixture f;
  f.set(kRail, "tcp_retransmits", 7);
  f.set(kRail, "tcp_rtt_us", 42, CounterKind::kGauge);
  f.set(kGpu, "ecc_corrected", 1);
  f.monitor->sample_now(kStart);
  const std::string text = prometheus_text(3, f.monitor->snapshot());
  EXPECT_NE(text.find("# TYPE weft_health_state gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE weft_tcp_retransmits_total counter\nweft_tcp_retransmits_total{rank=\"3\","
                      "kind=\"rail\",scope=\"rail 0 (weft-r0) to rank 1\",peer=\"1\",rail=\"0\","
                      "device=\"weft-r0\"} 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE weft_tcp_rtt_us gauge\nweft_tcp_rtt_us{"), std::string::npos);
  // Every family's TYPE line appears once.
  size_t types = 0;
  for (size_t at = 0; (at = text.find("# TYPE ", at)) != std::string::npos; ++at) ++types;
  EXPECT_EQ(types, 4u);
}

}  // namespace
}  // namespace weft::health

namespace weft::health {
namespace {

// What the communicator did about a scope (ISOLATED, PROBATION) shows over the judge's state
// until a HEALTHY is recorded, and is queued and logged like the judge's changes.
TEST(HealthMonitor, RecordedStatesShowOverTheJudgesUntilHealthyAgain) {
  Fixture f;
  f.set(kRail, "tcp_retransmits", 0);
  f.monitor->sample_now(kStart);
  Change isolated{kStart + absl::Seconds(1), kRail, State::kFailing, State::kIsolated, {}};
  isolated.reason.note = "isolated on rank 1's word";
  f.monitor->record(isolated);
  ASSERT_EQ(f.logged.size(), 1u);
  EXPECT_EQ(f.logged[0].to, State::kIsolated);
  auto queued = f.monitor->next_change();
  ASSERT_TRUE(queued.has_value());
  EXPECT_EQ(queued->to, State::kIsolated);
  f.monitor->sample_now(kStart + absl::Seconds(2));  // the judge still says HEALTHY
  auto snap = f.monitor->snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].state, State::kIsolated);
  EXPECT_EQ(snap[0].reason.text(), "isolated on rank 1's word");
  EXPECT_NE(prometheus_text(3, snap).find("} 3\n"), std::string::npos) << "state 3: ISOLATED";

  f.monitor->record({kStart + absl::Seconds(3), kRail, State::kIsolated, State::kProbation, {}});
  EXPECT_EQ(f.monitor->snapshot()[0].state, State::kProbation);
  f.monitor->record({kStart + absl::Seconds(4), kRail, State::kProbation, State::kHealthy, {}});
  EXPECT_EQ(f.monitor->snapshot()[0].state, State::kHealthy) << "the judge's state again";
  EXPECT_EQ(f.logged.size(), 3u);
}

}  // namespace
}  // namespace weft::health
