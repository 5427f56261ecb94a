// The arithmetic ring algorithms rely on: segments, chunk rounds, positions.
#include "collectives/ring_layout.hpp"

#include <vector>

#include "collectives/collective.hpp"
#include "gtest/gtest.h"

namespace weft {
namespace {

// Segments tile [0, count) exactly, in order, and differ in length by at most one, the
// longer ones first (ring reduce-scatter sizes its rounds from segment 0).
TEST(Segments, SplitTilesTheVector) {
  for (int n : {1, 2, 3, 4, 5, 7, 8, 64}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{63}, size_t{64},
                         size_t{65}, size_t{1023}, (size_t{1} << 20) + 3, (size_t{1} << 31) + 5}) {
      const Segments s = Segments::split(count, n);
      size_t next = 0;
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(s.offset(i), next) << "n=" << n << " count=" << count << " i=" << i;
        EXPECT_LE(s.length(i), s.length(0));
        EXPECT_GE(s.length(i) + 1, s.length(0));
        next += s.length(i);
      }
      EXPECT_EQ(next, count) << "n=" << n;
    }
  }
}

TEST(Segments, UniformBlocksArePerRank) {
  const Segments s = Segments::uniform(1000);
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(s.offset(i), static_cast<size_t>(i) * 1000);
    EXPECT_EQ(s.length(i), 1000u);
  }
  EXPECT_EQ(Segments::uniform(0).length(3), 0u);
}

// Every byte of every segment travels in exactly one round, rounds cover the longest
// segment, and no round carries more than one chunk.
TEST(Chunks, RoundsCoverEverySegmentOnce) {
  for (size_t chunk : {size_t{8}, size_t{4096}, size_t{1} << 20}) {
    const Chunks c{chunk};
    for (size_t longest : {size_t{0}, size_t{1}, chunk - 1, chunk, chunk + 1, 5 * chunk + 3}) {
      const size_t rounds = c.rounds(longest);
      EXPECT_GE(rounds * chunk, longest);
      if (rounds > 0) {
        EXPECT_LT((rounds - 1) * chunk, longest);
      }
      for (size_t bytes : {longest, longest / 2, size_t{0}}) {
        size_t total = 0;
        for (size_t r = 0; r < rounds; ++r) {
          EXPECT_LE(c.bytes_in(bytes, r), chunk);
          total += c.bytes_in(bytes, r);
        }
        EXPECT_EQ(total, bytes) << "chunk=" << chunk << " longest=" << longest;
        EXPECT_EQ(c.bytes_in(bytes, rounds), 0u);
      }
    }
  }
}

TEST(Ring, ModuloNeverGoesNegative) {
  EXPECT_EQ(ring_mod(-1, 5), 4);
  EXPECT_EQ(ring_mod(-5, 5), 0);
  EXPECT_EQ(ring_mod(-11, 5), 4);
  EXPECT_EQ(ring_mod(7, 5), 2);
  EXPECT_EQ(ring_mod(0, 1), 0);
}

TEST(Schedule, PositionsInvertTheRing) {
  const Schedule s(/*epoch=*/3, {2, 0, 3, 1});
  EXPECT_EQ(s.epoch(), 3u);
  for (int p = 0; p < 4; ++p) EXPECT_EQ(s.position_of(s.rank_at(p)), p);
  EXPECT_EQ(s.rank_at(-1), 1);
  EXPECT_EQ(s.rank_at(4), 2);
  EXPECT_EQ(s.rank_at(-6), 3);
}

}  // namespace
}  // namespace weft
