// BulkPace (transport/bulk_pace.hpp): which large messages a link copies into its peer's
// memory and which it leaves to be read in one copy, from how fast its large copies ran.
#include "transport/bulk_pace.hpp"

#include <gtest/gtest.h>

namespace weft::transport {
namespace {

constexpr size_t kLarge = BulkPace::kTimedFrom;
constexpr size_t kSmall = BulkPace::kTimedFrom - 1;
// A copy of kLarge bytes at 1 byte/ns (slow) and at 40 bytes/ns (fast, as near cores go).
constexpr int64_t kSlowNs = kLarge;
constexpr int64_t kFastNs = kLarge / 40;

TEST(BulkPaceTest, CopiesAreWorthMakingUntilTimedSlow) {
  BulkPace pace;
  EXPECT_TRUE(pace.worth(kLarge));
  EXPECT_TRUE(pace.worth(size_t{1} << 30));
  EXPECT_FALSE(pace.single_copy(kLarge));
}

TEST(BulkPaceTest, TwoSlowCopiesInARowSendLargeMessagesInOneCopy) {
  BulkPace pace;
  const int64_t now = BulkPace::now_ns();
  pace.timed(kLarge, kSlowNs, now);
  EXPECT_FALSE(pace.slow()) << "one slow copy may just have been interrupted";
  pace.timed(kLarge, kFastNs, now);
  pace.timed(kLarge, kSlowNs, now);
  EXPECT_FALSE(pace.slow()) << "the slow copies were not in a row";
  pace.timed(kLarge, kSlowNs, now);
  EXPECT_TRUE(pace.slow());
  EXPECT_FALSE(pace.worth(kLarge));
  EXPECT_TRUE(pace.single_copy(kLarge));
  // Smaller messages keep to copies: a rendezvous's round trip costs more than they do.
  EXPECT_TRUE(pace.worth(kSmall));
  EXPECT_FALSE(pace.single_copy(kSmall));
}

TEST(BulkPaceTest, OneFastCopyMakesCopiesWorthMakingAgain) {
  BulkPace pace;
  const int64_t now = BulkPace::now_ns();
  pace.timed(kLarge, kSlowNs, now);
  pace.timed(kLarge, kSlowNs, now);
  ASSERT_TRUE(pace.slow());
  pace.timed(kLarge, kFastNs, now);
  EXPECT_FALSE(pace.slow());
  EXPECT_TRUE(pace.worth(kLarge));
  EXPECT_FALSE(pace.single_copy(kLarge));
}

TEST(BulkPaceTest, WhileSlowACopyIsTriedAgainAfterTheRetryTime) {
  BulkPace pace;
  // The last timed copy ended longer ago than the retry time.
  const int64_t then = BulkPace::now_ns() - BulkPace::kRetryAfterNs - 1;
  pace.timed(kLarge, kSlowNs, then);
  pace.timed(kLarge, kSlowNs, then);
  ASSERT_TRUE(pace.slow());
  EXPECT_TRUE(pace.worth(kLarge)) << "time to learn whether copies got faster";
  EXPECT_TRUE(pace.single_copy(kLarge)) << "the message itself is still slow to copy";
  // The retry ran slow too: it stays slow, and the next retry waits its time again.
  pace.timed(kLarge, kSlowNs, BulkPace::now_ns());
  EXPECT_TRUE(pace.slow());
  EXPECT_FALSE(pace.worth(kLarge));
}

TEST(BulkPaceTest, CopyTimesOneLargeCopyInSeveral) {
  BulkPace pace;
  int copies = 0;
  // At least 100 us for kLarge bytes: well under kSlowBelowBytesPerNs on any machine.
  const auto slow_copy = [&] {
    ++copies;
    const int64_t until = BulkPace::now_ns() + 100'000;
    while (BulkPace::now_ns() < until) {
    }
  };
  pace.copy(kSmall, slow_copy);
  pace.copy(kSmall, slow_copy);
  EXPECT_EQ(copies, 2);
  EXPECT_FALSE(pace.slow()) << "copies below kTimedFrom are not timed";
  for (uint32_t i = 0; i < 2 * BulkPace::kTimeEvery - 1; ++i) pace.copy(kLarge, slow_copy);
  EXPECT_FALSE(pace.slow()) << "only one of them was timed";
  pace.copy(kLarge, slow_copy);
  EXPECT_EQ(copies, 2 + 2 * static_cast<int>(BulkPace::kTimeEvery));
  EXPECT_TRUE(pace.slow());
  // While slow every large copy is timed (each is a retry): one fast one is enough. A copy
  // that does nothing is fast, unless the thread was preempted in it; a few tries then.
  int tries = 0;
  while (pace.slow() && tries < 100) {
    pace.copy(kLarge, [] {});
    ++tries;
  }
  EXPECT_FALSE(pace.slow()) << "100 copies that did nothing were all slow";
}

}  // namespace
}  // namespace weft::transport
