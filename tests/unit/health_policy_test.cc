// The health policy and the judge: thresholds on deltas, rates and values, windows that
// slide, hysteresis on the way down, and bursts below a threshold that change nothing.
#include <gtest/gtest.h>

#include <optional>

#include "src/health/judge.hpp"
#include "src/health/policy.hpp"

namespace weft::health {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

Sample reading(const char* counter, double value, double at_seconds,
               CounterKind kind = CounterKind::kCumulative) {
  return Sample{Scope{.kind = ScopeKind::kRail, .peer = 2, .rail = 0, .device = "weft-r0"},
                kStart + absl::Seconds(at_seconds), {{counter, value, kind}}};
}

// The defaults, with tcp_retransmits judged by its rate (suspect 1/s, failing 20/s) so that
// one counter shows rates, and windows of 5 s with a recovery of 10 s.
Policy test_policy() {
  Policy p = Policy::defaults();
  p.window = absl::Seconds(5);
  p.recover = absl::Seconds(10);
  EXPECT_TRUE(p.apply_json(R"({"rules": {"tcp_retransmits": {"measure": "rate", "suspect": 1,
                                                              "failing": 20, "window_s": 5}}})", "test").ok());
  return p;
}

TEST(HealthPolicy, DefaultsCiteTheirAnchors) {
  const Policy p = Policy::defaults();
  const Rule* crc = p.rule_for("nvlink_crc_flit");
  ASSERT_NE(crc, nullptr);
  EXPECT_EQ(crc->measure, Measure::kRate);
  EXPECT_EQ(crc->failing, 100);  // DCGM: CRC errors matter at 100 per second
  const Rule* dbe = p.rule_for("ecc_uncorrected");
  ASSERT_NE(dbe, nullptr);
  EXPECT_EQ(dbe->failing, 1);
  for (const Rule& r : p.rules) EXPECT_FALSE(r.anchor.empty()) << r.counter;
  EXPECT_EQ(p.rule_for("link_bytes_sent"), nullptr);  // shown, never judged
}

TEST(HealthPolicy, OverridesSetThresholdsAndWindows) {
  Policy p = test_policy();
  ASSERT_TRUE(p.apply_overrides("tcp_retransmits=5/-/2, my_counter=1/2").ok());
  const Rule* r = p.rule_for("tcp_retransmits");
  EXPECT_EQ(r->suspect, 5);
  EXPECT_EQ(r->failing, kNever);
  EXPECT_EQ(p.window_of(*r), absl::Seconds(2));
  const Rule* mine = p.rule_for("my_counter");
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(mine->measure, Measure::kRate);
  EXPECT_EQ(p.window_of(*mine), absl::Seconds(5));
}

TEST(HealthPolicy, BadOverridesSayWhatIsExpected) {
  for (const char* bad : {"tcp_retransmits", "tcp_retransmits=5", "x=a/b", "x=1/2/0", "=1/2",
                          "x=-1/2"}) {
    Policy p = test_policy();
    const absl::Status s = p.apply_overrides(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("COUNTER=SUSPECT/FAILING"), std::string::npos) << s;
  }
}

TEST(HealthPolicy, JsonPolicyFile) {
  Policy p = test_policy();
  ASSERT_TRUE(p.apply_json(R"({"window_s": 2, "recover_s": 3, "rules": {
      "ecc_corrected": {"measure": "delta", "suspect": 4, "failing": null},
      "new_counter": {"failing": 7, "window_s": 9}}})", "test.json").ok());
  EXPECT_EQ(p.window, absl::Seconds(2));
  EXPECT_EQ(p.recover, absl::Seconds(3));
  EXPECT_EQ(p.rule_for("ecc_corrected")->measure, Measure::kDelta);
  EXPECT_EQ(p.rule_for("ecc_corrected")->suspect, 4);
  EXPECT_EQ(p.rule_for("ecc_corrected")->failing, kNever);
  EXPECT_EQ(p.rule_for("new_counter")->failing, 7);
  EXPECT_EQ(p.rule_for("new_counter")->window, absl::Seconds(9));
  for (const char* bad : {"[1]", "{\"window_s\": -1}", "{\"rules\": 3}",
                          "{\"rules\": {\"x\": {\"measure\": \"mean\"}}}",
                          "{\"rules\": {\"x\": {\"suspect\": \"high\"}}}", "{oops"}) {
    Policy q = test_policy();
    const absl::Status s = q.apply_json(bad, "bad.json");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("bad.json"), std::string::npos) << s;
  }
}

TEST(HealthPolicy, FromConfigReadsTheFileThenTheEnvironment) {
  Config c;
  c.health_window = absl::Seconds(4);
  c.health_recover = absl::Seconds(8);
  c.health_thresholds = "tcp_retransmits=3/30";
  c.health_policy_file = "/nonexistent/policy.json";
  EXPECT_NE(Policy::from_config(c).status().message().find("WEFT_HEALTH_POLICY"),
            std::string::npos);
  c.health_policy_file = "";
  auto p = Policy::from_config(c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->window, absl::Seconds(4));
  EXPECT_EQ(p->rule_for("tcp_retransmits")->failing, 30);
  EXPECT_GT(p->describe().size(), p->rules.size());
}

TEST(ScopeJudge, FirstReadingIsOnlyABaseline) {
  // Counters that were already high when the job started say nothing about now.
  ScopeJudge j(reading("ecc_uncorrected", 0, 0).scope);
  EXPECT_FALSE(j.observe(reading("ecc_uncorrected", 50, 0), test_policy()));
  EXPECT_EQ(j.state(), State::kHealthy);
}

TEST(ScopeJudge, ACounterThatAppearsLaterStartedAtZero) {
  // NVML reports xid_79 only once an XID 79 happened: that first event must count.
  const Policy p = test_policy();
  ScopeJudge j(reading("ecc_uncorrected", 0, 0).scope);
  j.observe(reading("ecc_uncorrected", 0, 0), p);
  Sample s = reading("ecc_uncorrected", 0, 1);
  s.counters.push_back({.name = "xid_79", .value = 1, .counted_here = true});
  auto change = j.observe(s, p);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->to, State::kFailing);
  EXPECT_EQ(change->reason.counter, "xid_79");
  EXPECT_EQ(change->reason.measured, 1);
}

TEST(ScopeJudge, ACounterFirstReadLateIsOnlyABaseline) {
  // A port's symbol errors unreadable at the first reading (an empty sysfs file) and 4211 at
  // the next: that is the port's lifetime count, not a burst.
  const Policy p = test_policy();
  ScopeJudge j(reading("ecc_uncorrected", 0, 0).scope);
  j.observe(reading("ecc_uncorrected", 0, 0), p);
  Sample s = reading("ecc_uncorrected", 0, 1);
  s.counters.push_back({"ib_symbol_error", 4211});
  EXPECT_FALSE(j.observe(s, p));
  s = reading("ecc_uncorrected", 0, 2);
  s.counters.push_back({"ib_symbol_error", 4211});
  EXPECT_FALSE(j.observe(s, p));
  EXPECT_EQ(j.state(), State::kHealthy);
}

TEST(ScopeJudge, RateAboveThresholdFailsWithItsReason) {
  const Policy p = test_policy();  // tcp_retransmits: rate, suspect 1/s, failing 20/s
  ScopeJudge j(reading("tcp_retransmits", 0, 0).scope);
  j.observe(reading("tcp_retransmits", 0, 0), p);
  auto change = j.observe(reading("tcp_retransmits", 100, 1), p);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->from, State::kHealthy);
  EXPECT_EQ(change->to, State::kFailing);
  EXPECT_EQ(change->reason.counter, "tcp_retransmits");
  EXPECT_DOUBLE_EQ(change->reason.measured, 100);
  EXPECT_EQ(change->reason.threshold, 20);
  EXPECT_EQ(change->reason.window, absl::Seconds(5));
  EXPECT_EQ(change->reason.text(), "tcp_retransmits rate 100/s >= 20/s over 5s");
}

Sample segments(double retransmits, double sent, double at_seconds) {
  Sample s = reading("tcp_retransmits", retransmits, at_seconds);
  s.counters.push_back({"tcp_segments_sent", sent});
  return s;
}

TEST(ScopeJudge, RetransmitsAreAShareOfTheSegmentsSent) {
  // The defaults: tcp_retransmits as a share of tcp_segments_sent, suspect at 1%, failing
  // at 3%, judged once 1000 segments went out in the window of 1 s.
  Policy p = Policy::defaults();
  ScopeJudge j(reading("tcp_retransmits", 0, 0).scope);
  j.observe(segments(0, 0, 0), p);
  // A busy healthy path: 40 retransmits in 100000 segments, far more than the rate of 20/s
  // that an absolute rule would fail on, is 0.04%: nothing.
  EXPECT_FALSE(j.observe(segments(40, 100000, 1), p));
  // A nearly idle path: 50 of 500 segments is 10%, but too few segments to judge.
  ScopeJudge idle(reading("tcp_retransmits", 0, 0).scope);
  idle.observe(segments(0, 0, 0), p);
  EXPECT_FALSE(idle.observe(segments(50, 500, 1), p));
  // 5% loss: 250 of 5000 segments since the window's baseline (the reading at t=1).
  auto change = j.observe(segments(290, 105000, 6), p);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->to, State::kFailing);
  EXPECT_DOUBLE_EQ(change->reason.measured, 0.05);
  EXPECT_EQ(change->reason.per, "tcp_segments_sent");
  EXPECT_EQ(change->reason.text(), "tcp_retransmits ratio 5% >= 3% of tcp_segments_sent over 1s");
}

TEST(ScopeJudge, ARatioIsMeasuredOverOneSpanWhenOneCounterStartsOver) {
  // Segments sent reset (a counter that went down starts over) while the retransmits kept
  // their history: 1.6% of the traffic must stay 1.6%, not 1 s of retransmits over 0.5 s of
  // segments.
  Policy p = Policy::defaults();
  ScopeJudge j(reading("tcp_retransmits", 0, 0).scope);
  double retransmits = 0, sent = 3.0e9;
  for (int tick = 0; tick <= 4; ++tick) {  // 100000 segments and 1600 retransmits a 0.5 s
    j.observe(segments(retransmits, sent, tick * 0.5), p);
    retransmits += 1600, sent += 100000;
  }
  ASSERT_EQ(j.state(), State::kSuspect);  // 1.6% >= 1%
  sent = 50000;  // started over
  for (int tick = 5; tick <= 8; ++tick) {
    EXPECT_FALSE(j.observe(segments(retransmits, sent, tick * 0.5), p)) << tick;
    EXPECT_EQ(j.state(), State::kSuspect) << tick << ": " << j.reason().text();
    retransmits += 1600, sent += 100000;
  }
}

TEST(ScopeJudge, BurstBelowTheThresholdChangesNothing) {
  // 99 CRC errors in one second, against DCGM's 100 per second: no change, and none as the
  // window slides on.
  const Policy p = test_policy();
  ScopeJudge j(reading("nvlink_crc_flit", 0, 0).scope);
  j.observe(reading("nvlink_crc_flit", 0, 0), p);
  EXPECT_FALSE(j.observe(reading("nvlink_crc_flit", 99, 1), p));
  for (int t = 2; t < 20; ++t) EXPECT_FALSE(j.observe(reading("nvlink_crc_flit", 99, t), p));
  EXPECT_EQ(j.state(), State::kHealthy);
}

TEST(ScopeJudge, DeltaCountsOnlyWhatFallsInTheWindow) {
  Policy p = test_policy();
  ASSERT_TRUE(p.apply_overrides("link_stalls=3/-").ok());
  ScopeJudge j(reading("link_stalls", 0, 0).scope);
  j.observe(reading("link_stalls", 0, 0), p);
  // Two stalls, then two more 6 s later: never three within 5 s.
  EXPECT_FALSE(j.observe(reading("link_stalls", 2, 1), p));
  EXPECT_FALSE(j.observe(reading("link_stalls", 2, 6), p));
  EXPECT_FALSE(j.observe(reading("link_stalls", 4, 7), p));
  // A third within the window of the last two crosses it.
  auto change = j.observe(reading("link_stalls", 5, 8), p);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->to, State::kSuspect);
  EXPECT_EQ(change->reason.measured, 3);
}

TEST(ScopeJudge, HysteresisHoldsTheStateUntilTheRecoveryTimePasses) {
  const Policy p = test_policy();  // window 5 s, recover 10 s
  ScopeJudge j(reading("tcp_retransmits", 0, 0).scope);
  j.observe(reading("tcp_retransmits", 0, 0), p);
  ASSERT_TRUE(j.observe(reading("tcp_retransmits", 500, 1), p));
  // The retransmits stop at t=1. The window holds them until t=6; from then the rate is
  // under the threshold, and the state must wait 10 s more.
  for (int t = 2; t < 16; ++t) {
    EXPECT_FALSE(j.observe(reading("tcp_retransmits", 500, t), p)) << "t=" << t;
    EXPECT_EQ(j.state(), State::kFailing) << "t=" << t;
  }
  auto change = j.observe(reading("tcp_retransmits", 500, 16), p);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->from, State::kFailing);
  EXPECT_EQ(change->to, State::kHealthy);
  EXPECT_EQ(change->reason.counter, "tcp_retransmits");  // the cause, now under its threshold
  EXPECT_EQ(change->reason.measured, 0);
  EXPECT_EQ(j.state(), State::kHealthy);
}

TEST(ScopeJudge, ABlipDuringRecoveryStartsTheWaitAgain) {
  const Policy p = test_policy();
  ScopeJudge j(reading("nvlink_replay", 0, 0).scope);
  j.observe(reading("nvlink_replay", 0, 0), p);
  ASSERT_TRUE(j.observe(reading("nvlink_replay", 1, 1), p));  // SUSPECT: delta >= 1
  // Below from t=7 (the window has passed); one more replay at t=12 restarts the clock.
  for (int t = 2; t <= 11; ++t) EXPECT_FALSE(j.observe(reading("nvlink_replay", 1, t), p));
  EXPECT_FALSE(j.observe(reading("nvlink_replay", 2, 12), p));
  for (int t = 13; t <= 26; ++t) EXPECT_FALSE(j.observe(reading("nvlink_replay", 2, t), p));
  EXPECT_EQ(j.state(), State::kSuspect);
  EXPECT_TRUE(j.observe(reading("nvlink_replay", 2, 27), p));
  EXPECT_EQ(j.state(), State::kHealthy);
}

TEST(ScopeJudge, EscalatesFromSuspectToFailing) {
  const Policy p = test_policy();
  ScopeJudge j(reading("tcp_retransmits", 0, 0).scope);
  j.observe(reading("tcp_retransmits", 0, 0), p);
  auto suspect = j.observe(reading("tcp_retransmits", 5, 1), p);  // 5/s: >= 1, < 20
  ASSERT_TRUE(suspect);
  EXPECT_EQ(suspect->to, State::kSuspect);
  auto failing = j.observe(reading("tcp_retransmits", 100, 2), p);  // 50/s over 2 s
  ASSERT_TRUE(failing);
  EXPECT_EQ(failing->from, State::kSuspect);
  EXPECT_EQ(failing->to, State::kFailing);
}

TEST(ScopeJudge, GaugesAreJudgedByValue) {
  const Policy p = test_policy();  // nvlink_down: value, failing at 1
  ScopeJudge j(reading("nvlink_down", 0, 0, CounterKind::kGauge).scope);
  EXPECT_FALSE(j.observe(reading("nvlink_down", 0, 0, CounterKind::kGauge), p));
  auto change = j.observe(reading("nvlink_down", 1, 1, CounterKind::kGauge), p);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->to, State::kFailing);
  EXPECT_EQ(change->reason.text(), "nvlink_down value 1 >= 1");
}

TEST(ScopeJudge, ACounterThatGoesDownStartsOver) {
  // A cleared port counter (perfquery -R) must not read as a huge negative delta, nor hide
  // the errors that follow.
  const Policy p = test_policy();
  ScopeJudge j(reading("ib_symbol_error", 0, 0).scope);
  j.observe(reading("ib_symbol_error", 1000, 0), p);
  EXPECT_FALSE(j.observe(reading("ib_symbol_error", 0, 1), p));
  auto change = j.observe(reading("ib_symbol_error", 12, 2), p);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->to, State::kFailing);  // ibqueryerrors: 10 symbol errors
  EXPECT_EQ(change->reason.measured, 12);
}

TEST(ScopeJudge, ReadingsCarryValuesAndRates) {
  const Policy p = test_policy();
  ScopeJudge j(reading("tcp_retransmits", 0, 0).scope);
  j.observe(reading("tcp_retransmits", 0, 0), p);
  j.observe(reading("tcp_retransmits", 10, 2), p);
  const auto readings = j.readings();
  ASSERT_EQ(readings.size(), 1u);
  EXPECT_EQ(readings[0].value, 10);
  EXPECT_DOUBLE_EQ(readings[0].rate, 5);
}

}  // namespace
}  // namespace weft::health
