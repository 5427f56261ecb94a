// weft health's job view (tools/health/view.hpp): every rank's /health and /route merged,
// the exit status, and the JSON schema scripts read (weft.health/1).
#include <gtest/gtest.h>

#include "tools/health/view.hpp"

namespace weft::tools::health {
namespace {

RankView rank(int r, const char* link_state, uint64_t epoch) {
  RankView v;
  v.endpoint = "127.0.0.1:" + std::to_string(9400 + r);
  v.health = {{"rank", r},
              {"scopes", {{{"scope", "link to rank " + std::to_string(1 - r)},
                           {"kind", "link"},
                           {"peer", 1 - r},
                           {"state", link_state},
                           {"since", "2026-12-03T00:03:45.296Z"},
                           {"reason", {{"text", "tcp_retransmits ratio 4.7% >= 3%"}}},
                           {"counters", {{"link_bytes_sent", {{"value", 1e9}, {"rate", 1e6}}},
                                         {"tcp_retransmits", {{"value", 900}, {"rate", 30}}},
                                         {"tcp_retransmits_spurious",
                                          {{"value", 600}, {"rate", 20}}}}}}}}};
  v.route = {{"rank", r},
             {"epoch", epoch},
             {"ring", {0, 1}},
             {"isolated_links", epoch > 0 ? nlohmann::json{{0, 1}} : nlohmann::json::array()},
             {"isolated_rails", nlohmann::json::array()},
             {"changes", epoch > 0 ? nlohmann::json{{{"time", "2026-12-03T00:03:45.296Z"},
                                                     {"epoch", 1},
                                                     {"change", "route epoch 1: isolate link 0-1"}}}
                                   : nlohmann::json::array()}};
  return v;
}

TEST(HealthView, MergesRanksAndTakesTheMostAdvancedRoute) {
  // Rank 1 has adopted epoch 1, rank 0 is still in the call that adopts it.
  const nlohmann::json job = job_json({rank(1, "ISOLATED", 1), rank(0, "HEALTHY", 0)}, "t");
  EXPECT_EQ(job["schema"], "weft.health/1");
  EXPECT_EQ(job["answered"], 2);
  EXPECT_EQ(job["endpoints"], 2);
  EXPECT_EQ(job["epoch"], 1);
  EXPECT_EQ(job["isolated_links"], nlohmann::json::array({{0, 1}}));
  ASSERT_EQ(job["route_changes"].size(), 1u);
  ASSERT_EQ(job["not_healthy"].size(), 1u);
  EXPECT_EQ(job["not_healthy"][0]["rank"], 1);
  EXPECT_EQ(job["not_healthy"][0]["state"], "ISOLATED");
  EXPECT_EQ(job["not_healthy"][0]["reason"], "tcp_retransmits ratio 4.7% >= 3%");
  EXPECT_EQ(job["ranks"][0]["rank"], 0) << "ranks in order";
  EXPECT_EQ(job_status(job), 1);

  const std::string table = job_table(job);
  EXPECT_NE(table.find("route epoch 1, ring 0 1; isolated: 0-1"), std::string::npos) << table;
  EXPECT_NE(table.find("00:03:45.296  route epoch 1: isolate link 0-1"), std::string::npos) << table;
  // 30/s retransmitted, 20/s of them spurious: 10/s shown.
  const size_t row = table.find("1     0     ISOLATED");
  ASSERT_NE(row, std::string::npos) << table;
  const std::string line = table.substr(row, table.find('\n', row) - row);
  EXPECT_NE(line.find("1 GB (1 MB/s)"), std::string::npos) << line;
  EXPECT_EQ(line.substr(line.size() - 3), " 10") << line;
}

TEST(HealthView, HealthyIsZeroAndSilenceIsTwo) {
  EXPECT_EQ(job_status(job_json({rank(0, "HEALTHY", 0), rank(1, "HEALTHY", 0)}, "t")), 0);
  RankView gone;
  gone.endpoint = "127.0.0.1:9401";
  gone.error = "no answer on 127.0.0.1:9401 (Connection)";
  const nlohmann::json job = job_json({rank(0, "HEALTHY", 0), gone}, "t");
  EXPECT_EQ(job["answered"], 1);
  EXPECT_EQ(job_status(job), 2);
  EXPECT_NE(job_table(job).find("does not answer"), std::string::npos);
}

// A server on the port that is not weft's, or a body of another shape, is an endpoint that
// did not answer as weft: never a healthy rank, never a crash.
TEST(HealthView, AnswersNotShapedAsWeftsAreNotARank) {
  const std::vector<nlohmann::json> foreign = {
      nlohmann::json::array(), 1, {{"status", "ok"}}, {{"rank", 0}, {"scopes", {1}}},
      {{"rank", "0"}, {"scopes", nlohmann::json::array()}},
      {{"rank", 0}, {"scopes", {{{"state", 3}}}}}};
  for (const nlohmann::json& body : foreign) {
    RankView v;
    v.endpoint = "127.0.0.1:9401";
    v.health = body;
    const nlohmann::json job = job_json({rank(0, "HEALTHY", 0), v}, "t");
    EXPECT_EQ(job["answered"], 1) << body;
    EXPECT_EQ(job_status(job), 2) << body;
    const std::string table = job_table(job);
    EXPECT_NE(table.find("does not look like weft's"), std::string::npos) << table;
  }
  // A /route of another shape is left out; the rank's /health still counts.
  RankView odd = rank(1, "HEALTHY", 0);
  odd.route["isolated_links"] = {{"a"}};
  const nlohmann::json job = job_json({rank(0, "HEALTHY", 0), odd}, "t");
  EXPECT_EQ(job["answered"], 2);
  EXPECT_EQ(job["isolated_links"], nlohmann::json::array());
  EXPECT_NE(job_table(job).find("/route does not look like weft's"), std::string::npos);
}

}  // namespace
}  // namespace weft::tools::health
