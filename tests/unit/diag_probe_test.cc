// weft diag probe's parts that need no job: the tournament schedule, the outlier judgement
// (no false alarm on noisy healthy data, every slow link found) and the JSON it writes.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>

#include "tools/diag/outliers.hpp"
#include "tools/diag/probe.hpp"
#include "tools/diag/probe_report.hpp"
#include "tools/diag/schedule.hpp"

namespace weft::tools::diag {
namespace {

TEST(Tournament, EveryPairExactlyOnceAndNoRankTwiceInARound) {
  for (int n = 1; n <= 33; ++n) {
    const std::vector<Round> rounds = tournament(n);
    std::set<std::pair<int, int>> seen;
    for (const Round& round : rounds) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_GE(a, 0);
        EXPECT_LT(b, n);
        EXPECT_TRUE(busy.insert(a).second) << "n=" << n << ": rank " << a << " twice in a round";
        EXPECT_TRUE(busy.insert(b).second) << "n=" << n << ": rank " << b << " twice in a round";
        EXPECT_TRUE(seen.insert({a, b}).second) << "n=" << n << ": pair " << a << "-" << b
                                               << " measured twice";
      }
      // Everyone plays, but one rank of an odd count.
      EXPECT_EQ(round.size(), static_cast<size_t>(n / 2)) << "n=" << n;
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(n * (n - 1) / 2)) << "n=" << n;
    EXPECT_EQ(rounds.size(), n < 2 ? 0u : static_cast<size_t>(n % 2 ? n : n - 1)) << "n=" << n;
  }
}

TEST(Tournament, PartnerIsSymmetric) {
  for (const Round& round : tournament(7)) {
    for (int r = 0; r < 7; ++r) {
      const int p = partner(round, r);
      if (p >= 0) EXPECT_EQ(partner(round, p), r);
    }
  }
}

// Directed cells of `n` ranks over one class, `repeats` samples each from `draw(from, to)`.
template <typename Draw>
std::vector<Cell> cells(int n, int repeats, Draw draw) {
  std::vector<Cell> out;
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      if (from == to) continue;
      Cell c;
      c.from = from, c.to = to, c.klass = "tcp";
      for (int k = 0; k < repeats; ++k) c.repeats.push_back(draw(from, to));
      out.push_back(std::move(c));
    }
  }
  return out;
}

// Healthy links measured on a busy machine. On this project's 2-core VM, five fault-free
// probes of 4 virtual hosts (540 samples, each the fastest of 3 transfers) ranged from 0.51
// to 3.4 times their class median, 1% below 0.65 and 5% below 0.82: none below 0.5. The
// model here is noisier: log-normal (sigma 0.2: 1% below 0.63, 5% below 0.72) with one
// sample in a hundred cut to 40% by a burst (about 1% below the threshold, five times what
// was seen), over the default five repeats; a latency sample (the median of 50 pings)
// wanders +-50% and one in five hundred is 200 us late.
TEST(Outliers, NoFalseAlarmOnNoisyHealthyData) {
  std::mt19937 rng(12345);
  std::lognormal_distribution<double> wander(0.0, 0.2);
  std::uniform_real_distribution<double> unit(0, 1);
  int cells_judged = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 3 + trial % 6;
    std::vector<Cell> c = cells(n, ProbeOptions{}.repeats, [&](int, int) {
      Sample s{5.0 * wander(rng), 2.0 * wander(rng) * (unit(rng) < 0.01 ? 0.4 : 1)};
      if (unit(rng) < 0.002) s.latency_us += 200;
      return s;
    });
    judge(c, OutlierOptions{});
    for (const Cell& cell : c) {
      ++cells_judged;
      EXPECT_EQ(cell.flag, "") << "trial " << trial << ": " << cell.from << "->" << cell.to
                               << " flagged " << cell.flag << " at " << cell.bandwidth_GBps
                               << " GB/s, class " << cell.class_bandwidth_GBps;
    }
  }
  EXPECT_GT(cells_judged, 10000);
}

// One host's links at 300 Mbit/s among 10 Gbit/s ones: with four ranks, half the links, and
// still exactly those are flagged, with full confidence. (With three ranks a bad host slows
// two links of three: the median is then a slow one, and the probe cannot tell which host
// is bad from bandwidth alone.)
TEST(Outliers, FlagsExactlyTheSlowHostsLinks) {
  std::mt19937 rng(7);
  std::lognormal_distribution<double> wander(0.0, 0.2);
  for (int n : {4, 5, 8}) {
    const int slow_rank = 2;
    std::vector<Cell> c = cells(n, 3, [&](int from, int to) {
      const bool slow = from == slow_rank || to == slow_rank;
      return Sample{5.0 * wander(rng), (slow ? 0.036 : 1.2) * wander(rng)};
    });
    EXPECT_TRUE(judge(c, OutlierOptions{}).empty());
    for (const Cell& cell : c) {
      const bool slow = cell.from == slow_rank || cell.to == slow_rank;
      EXPECT_EQ(cell.flag, slow ? "slow" : "") << "n=" << n << " " << cell.from << "->" << cell.to;
      if (slow) EXPECT_DOUBLE_EQ(cell.confidence, 1.0);
    }
  }
}

TEST(Outliers, OneBadRepeatOfThreeIsNotEnough) {
  std::vector<Cell> c = cells(4, 3, [](int, int) { return Sample{5, 1}; });
  c[0].repeats[1].bandwidth_GBps = 0.01;
  judge(c, OutlierOptions{});
  EXPECT_EQ(c[0].flag, "");
  EXPECT_NEAR(c[0].confidence, 1.0 / 3, 1e-9);
  c[0].repeats[2].bandwidth_GBps = 0.01;
  judge(c, OutlierOptions{});
  EXPECT_EQ(c[0].flag, "slow");
  EXPECT_NEAR(c[0].confidence, 2.0 / 3, 1e-9);
}

TEST(Outliers, HighLatencyNeedsTheFloorToo) {
  std::vector<Cell> c = cells(4, 3, [](int, int) { return Sample{5, 1}; });
  for (Sample& s : c[3].repeats) s.latency_us = 40;  // 8x, but only 35 us more
  for (Sample& s : c[5].repeats) s.latency_us = 400;
  judge(c, OutlierOptions{});
  EXPECT_EQ(c[3].flag, "");
  EXPECT_EQ(c[5].flag, "high latency");
}

TEST(Outliers, ClassesAreJudgedApartAndTooSmallOnesNotAtAll) {
  std::vector<Cell> c = cells(4, 3, [](int, int) { return Sample{1, 10}; });
  // shm is far faster than tcp: comparing across classes would flag every tcp cell.
  for (Cell& cell : c) {
    if (cell.from < 2 && cell.to < 2) cell.klass = "shm";
    for (Sample& s : cell.repeats) s.bandwidth_GBps = cell.klass == "shm" ? 10 : 1;
  }
  const std::vector<std::string> unjudged = judge(c, OutlierOptions{});
  ASSERT_EQ(unjudged, std::vector<std::string>{"shm"});  // two cells: no median to speak of
  for (const Cell& cell : c) EXPECT_EQ(cell.flag, "");
}

TEST(Outliers, UpperMedian) {
  EXPECT_EQ(upper_median({}), 0);
  EXPECT_EQ(upper_median({3}), 3);
  EXPECT_EQ(upper_median({1, 9}), 9);
  EXPECT_EQ(upper_median({5, 1, 9}), 5);
  EXPECT_EQ(upper_median({0.1, 0.1, 2, 2}), 2);
}

// The JSON every script reads (docs/DIAG.md): its fields and types.
TEST(ProbeJson, FollowsTheSchema) {
  ProbeReport report;
  report.result.ranks = 3;
  report.result.hosts = {"h0", "h1", "h2"};
  report.result.paths = {"link"};
  report.options.repeats = 3;
  // One direction of one link slow: 2 -> 0.
  report.result.cells = cells(3, 3, [](int, int) { return Sample{5, 1.0}; });
  for (Cell& cell : report.result.cells) {
    if (cell.from == 2 && cell.to == 0) {
      for (Sample& s : cell.repeats) s.bandwidth_GBps = 0.01;
    }
  }
  report.unjudged_classes = judge(report.result.cells, report.outliers);
  const nlohmann::json j = probe_json(report);
  EXPECT_EQ(j["schema"], "weft.diag.probe/1");
  EXPECT_EQ(j["ranks"], 3);
  EXPECT_EQ(j["hosts"].size(), 3u);
  EXPECT_EQ(j["paths"], nlohmann::json::array({"link"}));
  EXPECT_EQ(j["repeats"], 3);
  EXPECT_TRUE(j["message_bytes"].is_number_unsigned());
  EXPECT_TRUE(j["threshold"].is_number_float());
  ASSERT_EQ(j["cells"].size(), 6u);
  for (const auto& cell : j["cells"]) {
    for (const char* key : {"from", "to"}) EXPECT_TRUE(cell[key].is_number_integer()) << key;
    for (const char* key : {"latency_us", "bandwidth_GBps", "class_latency_us",
                            "class_median_GBps", "confidence"}) {
      EXPECT_TRUE(cell[key].is_number()) << key;
    }
    EXPECT_EQ(cell["path"], "link");
    EXPECT_EQ(cell["class"], "tcp");
    EXPECT_TRUE(cell["flag"].is_null() || cell["flag"].is_string());
    EXPECT_EQ(cell["repeats"].size(), 3u);
    const bool slow = cell["from"] == 2 && cell["to"] == 0;
    EXPECT_EQ(cell["flag"].is_null(), !slow);
  }
  ASSERT_EQ(j["flagged"].size(), 1u);
  EXPECT_EQ(j["flagged"][0]["ranks"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(j["flagged"][0]["hosts"], nlohmann::json::array({"h0", "h2"}));
  EXPECT_EQ(j["flagged"][0]["path"], "link");
  EXPECT_EQ(j["flagged"][0]["flag"], "slow");
  EXPECT_EQ(j["flagged"][0]["reasons"].size(), 1u);
  EXPECT_EQ(j["verdict"], "degraded");
  EXPECT_TRUE(j["unjudged_classes"].empty());
  EXPECT_NE(probe_table(report).find("# verdict: degraded, 1 link(s)"), std::string::npos);
}

}  // namespace
}  // namespace weft::tools::diag
