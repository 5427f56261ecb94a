// weft diag health's verdict from what every rank saw (tools/diag/verdict.hpp): both ends of a
// link merged, ratio counters judged over the whole run, probe flags and GPU storms as
// evidence, and the JSON it writes.
#include <gtest/gtest.h>

#include "tools/diag/verdict.hpp"

namespace weft::tools::diag {
namespace {

nlohmann::json counters(double retransmits, double segments) {
  return nlohmann::json::array({{{"name", "tcp_retransmits"}, {"value", retransmits}},
                                {{"name", "tcp_segments_sent"}, {"value", segments}}});
}

nlohmann::json link(int peer, double retransmits, double segments,
                    nlohmann::json why = nlohmann::json::array()) {
  return {{"kind", "link"}, {"name", "link to rank " + std::to_string(peer)}, {"peer", peer},
          {"counters", counters(retransmits, segments)}, {"why", std::move(why)}};
}

// A monitor's windowed judgement of tcp_retransmits.
nlohmann::json windowed_failing() {
  return nlohmann::json::array({{{"state", "FAILING"}, {"counter", "tcp_retransmits"},
                                 {"measure", "ratio"}, {"measured", 0.05}, {"threshold", 0.03},
                                 {"reason", "tcp_retransmits ratio 5% >= 3% over 1s"}}});
}

const Verdict& find(const std::vector<Verdict>& v, const std::string& scope) {
  for (const Verdict& x : v) {
    if (x.scope == scope) return x;
  }
  ADD_FAILURE() << "no verdict for " << scope;
  static Verdict none;
  return none;
}

ProbeReport three_hosts() {
  ProbeReport p;
  p.result.ranks = 3;
  p.result.hosts = {"h0", "h1", "h2"};
  p.result.paths = {"link"};
  return p;
}

TEST(DiagVerdict, RetransmitsAreJudgedOverTheWholeRun) {
  ProbeReport probe = three_hosts();
  // Rank 0's monitor caught a clump on its link to 1 (5% in one window), but over the run
  // it is 0.2%; the link 0-2 lost 5% of its segments over the run, as both ends saw.
  const std::vector<nlohmann::json> seen = {
      {{"rank", 0}, {"scopes", {link(1, 120, 60000, windowed_failing()), link(2, 3000, 60000)}}},
      {{"rank", 1}, {"scopes", {link(0, 100, 60000), link(2, 50, 60000)}}},
      {{"rank", 2}, {"scopes", {link(0, 2900, 58000), link(1, 40, 60000)}}},
  };
  const std::vector<Verdict> v = judge_job(seen, &probe, health::Policy::defaults());
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(find(v, "link 0-1 (h0-h1)").state, "HEALTHY");
  EXPECT_EQ(find(v, "link 1-2 (h1-h2)").state, "HEALTHY");
  const Verdict& bad = find(v, "link 0-2 (h0-h2)");
  EXPECT_EQ(bad.state, "FAILING");
  EXPECT_EQ(bad.ranks, (std::vector<int>{0, 2}));
  ASSERT_EQ(bad.evidence.size(), 2u) << bad.evidence.dump();  // one from each end
  for (const nlohmann::json& e : bad.evidence) {
    EXPECT_EQ(e["counter"], "tcp_retransmits");
    EXPECT_EQ(e["threshold"], 0.03);
    EXPECT_NEAR(e["measured"].get<double>(), 0.05, 1e-9);
  }
  EXPECT_EQ(v.front().scope, "link 0-2 (h0-h2)") << "the worst first";
  EXPECT_TRUE(degraded(v));
  const std::string table = health_table(v, &probe);
  EXPECT_NE(table.find("FAILING   link 0-2 (h0-h2)"), std::string::npos) << table;
  EXPECT_NE(table.find("tcp_retransmits 3000 of 60000 tcp_segments_sent (5%)"), std::string::npos)
      << table;
  EXPECT_EQ(table.find("link 0-1"), std::string::npos) << "healthy scopes are not listed";
}

// 5% retransmitted, but the peer already had 4.5% (D-SACK: reordering, as veth does under
// load): 0.5% lost is HEALTHY. Without the duplicates counted, 5% is FAILING.
TEST(DiagVerdict, SpuriousRetransmitsAreNotLoss) {
  ProbeReport probe = three_hosts();
  nlohmann::json reordered = link(1, 3000, 60000);
  reordered["counters"].push_back({{"name", "tcp_retransmits_spurious"}, {"value", 2700}});
  const std::vector<nlohmann::json> seen = {{{"rank", 0}, {"scopes", {reordered}}},
                                            {{"rank", 1}, {"scopes", {link(0, 0, 60000)}}},
                                            {{"rank", 2}, {"scopes", nlohmann::json::array()}}};
  EXPECT_FALSE(degraded(judge_job(seen, &probe, health::Policy::defaults())));
  reordered["counters"][2]["value"] = 0;
  const std::vector<nlohmann::json> lossy = {seen[0], seen[1], seen[2]};
  std::vector<nlohmann::json> now = lossy;
  now[0]["scopes"][0] = reordered;
  const std::vector<Verdict> v = judge_job(now, &probe, health::Policy::defaults());
  EXPECT_EQ(find(v, "link 0-1 (h0-h1)").state, "FAILING");
}

TEST(DiagVerdict, AFewSegmentsAreNotJudged) {
  ProbeReport probe = three_hosts();
  const std::vector<nlohmann::json> seen = {{{"rank", 0}, {"scopes", {link(1, 5, 100)}}},
                                            {{"rank", 1}, {"scopes", {link(0, 0, 100)}}},
                                            {{"rank", 2}, {"scopes", nlohmann::json::array()}}};
  EXPECT_FALSE(degraded(judge_job(seen, &probe, health::Policy::defaults())));
}

TEST(DiagVerdict, ProbeFlagsAndGpuStormsAreEvidence) {
  ProbeReport probe = three_hosts();
  Cell slow;
  slow.from = 2, slow.to = 1, slow.path = 0, slow.klass = "tcp";
  slow.repeats = {{5, 0.03}, {5, 0.03}, {5, 0.03}};
  slow.bandwidth_GBps = 0.03, slow.class_bandwidth_GBps = 1.5;
  slow.flag = "slow", slow.confidence = 1;
  probe.result.cells.push_back(slow);
  const nlohmann::json storm = {
      {"kind", "nvlink"}, {"name", "nvlink 0 of gpu 1 to rank 2"}, {"peer", 2}, {"gpu", 1},
      {"counters", nlohmann::json::array()},
      {"why", {{{"state", "FAILING"}, {"counter", "nvlink_crc_flit"}, {"measure", "rate"},
                {"measured", 250.0}, {"threshold", 100.0},
                {"reason", "nvlink_crc_flit rate 250/s >= 100/s over 5s"}}}}};
  const std::vector<nlohmann::json> seen = {{{"rank", 0}, {"scopes", nlohmann::json::array()}},
                                            {{"rank", 1}, {"scopes", {storm}}},
                                            {{"rank", 2}, {"scopes", nlohmann::json::array()}}};
  const std::vector<Verdict> v = judge_job(seen, &probe, health::Policy::defaults());
  const Verdict& nvlink = find(v, "nvlink 0 of gpu 1 to rank 2 of rank 1 (h1)");
  EXPECT_EQ(nvlink.state, "FAILING");
  ASSERT_EQ(nvlink.evidence.size(), 1u);
  EXPECT_EQ(nvlink.evidence[0]["counter"], "nvlink_crc_flit");
  EXPECT_EQ(nvlink.evidence[0]["measured"], 250.0);
  const Verdict& link12 = find(v, "link 1-2 (h1-h2)");
  EXPECT_EQ(link12.state, "SUSPECT");
  ASSERT_EQ(link12.evidence.size(), 1u);
  EXPECT_EQ(link12.evidence[0]["source"], "probe");
  EXPECT_EQ(link12.evidence[0]["measure"], "bandwidth_GBps");
  EXPECT_NEAR(link12.evidence[0]["threshold"].get<double>(), 0.75, 1e-9);  // half of 1.5

  const nlohmann::json j = health_json(v, &probe, seen);
  EXPECT_EQ(j["schema"], "weft.diag.health/1");
  EXPECT_EQ(j["verdict"], "degraded");
  EXPECT_EQ(j["ranks"].size(), 3u);
  EXPECT_EQ(j["probe"]["schema"], "weft.diag.probe/1");
  for (const nlohmann::json& x : j["verdicts"]) {
    for (const char* key : {"scope", "kind", "state"}) EXPECT_TRUE(x[key].is_string()) << key;
    EXPECT_TRUE(x["ranks"].is_array());
    EXPECT_TRUE(x["evidence"].is_array());
    for (const nlohmann::json& e : x["evidence"]) {
      EXPECT_TRUE(e["source"] == "counter" || e["source"] == "probe");
      EXPECT_TRUE(e["reason"].is_string());
    }
  }
}

}  // namespace
}  // namespace weft::tools::diag
