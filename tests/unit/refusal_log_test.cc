// RefusalLog: strangers cannot set the log's volume. A fake clock and a sink that keeps the
// lines make every case exact.
#include "src/base/refusal_log.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

struct Harness {
  std::vector<std::string> lines;
  absl::Time now = absl::UnixEpoch();
  RefusalLog log{"tcp: rank 2 (127.0.0.1:4000)",
                 [this](const std::string& l) { lines.push_back(l); }, [this] { return now; }};
};

TEST(RefusalLog, AFloodIsAFewLinesAndOneSummaryPerInterval) {
  Harness h;
  for (int i = 0; i < 24592; ++i) {
    h.log.refused(i % 41 ? "not a weft hello" : "a wrong proof of the secret",
                  absl::StrCat("stranger ", i));
    h.now += absl::Milliseconds(1);  // 24.6 s in all
  }
  // 5 in full, a summary after 10 s and after 20 s; the rest waits for its interval.
  ASSERT_EQ(h.lines.size(), size_t(RefusalLog::kFullLines + 2));
  EXPECT_EQ(h.lines[0], "tcp: rank 2 (127.0.0.1:4000): stranger 0");
  EXPECT_THAT(h.lines[4], HasSubstr("further refusals are summarised every 10s"));
  EXPECT_THAT(h.lines[5], HasSubstr("tcp: rank 2 (127.0.0.1:4000): refused 10001 connections in 10.0 s: "));
  EXPECT_THAT(h.lines[5], HasSubstr("a wrong proof of the secret"));
  EXPECT_THAT(h.lines[5], HasSubstr("not a weft hello; last: stranger 10005"));
  h.log.flush();
  ASSERT_EQ(h.lines.size(), size_t(RefusalLog::kFullLines + 3));
  EXPECT_THAT(h.lines.back(), HasSubstr("refused 4585 connections in 4.6 s"));
  EXPECT_EQ(h.log.total(), 24592u);
}

TEST(RefusalLog, SilentConnectionsAreOnlyEverSummarised) {
  Harness h;
  for (int i = 0; i < 3; ++i) h.log.counted("silent", absl::StrCat("silent ", i));
  EXPECT_EQ(h.lines.size(), size_t(0));
  h.now += RefusalLog::kInterval;
  h.log.tick();  // a summary falls due with no connection to bring it
  ASSERT_EQ(h.lines.size(), size_t(1));
  EXPECT_THAT(h.lines[0], HasSubstr("refused 3 connections in 10.0 s: 3 silent; last: silent 2"));
  h.log.tick();
  EXPECT_EQ(h.lines.size(), size_t(1));  // nothing new, nothing printed
}

TEST(RefusalLog, WhatIsLeftIsSummarisedWhenTheLogCloses) {
  std::vector<std::string> lines;
  {
    RefusalLog log("rendezvous 127.0.0.1:29500", [&](const std::string& l) { lines.push_back(l); });
    log.counted("a truncated hello", "half a hello");
    EXPECT_EQ(log.last(), "");  // only refusals worth a line are "last" for timeout messages
    log.refused("not a weft hello", "garbage");
    EXPECT_EQ(log.last(), "garbage");
  }
  // The refusal could not go out in full while a counted one waited unreported: both are in
  // the closing summary.
  ASSERT_EQ(lines.size(), size_t(1));
  EXPECT_THAT(lines[0], HasSubstr("refused 2 connections"));
  EXPECT_THAT(lines[0], HasSubstr("1 a truncated hello, 1 not a weft hello; last: garbage"));
}

}  // namespace
}  // namespace weft
