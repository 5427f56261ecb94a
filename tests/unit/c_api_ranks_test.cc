// The C API (weft/weft.h) on three ranks that are threads of this process: every collective
// with exact results (small integers), abort, asynchronous errors (polled from another thread
// too) and shrink, and a timeout.
// Loopback only; every wait is bounded by WEFT_TIMEOUT.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "tests/unit/c_api_harness.hpp"
#include "tests/unit/scoped_env.hpp"
#include "weft/weft.h"
#include "tests/unit/stopwatch.hpp"

namespace {

using ::testing::HasSubstr;
using namespace weft::testing;  // c_api_harness.hpp, ScopedEnv

TEST(CApi, ThreeRanks) {
  constexpr int kRanks = 3;
  std::vector<weftComm_t> comms = init_comms(kRanks);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  constexpr size_t kCount = 10;  // does not divide by 3
  on_every_rank(kRanks, [&](int r) {
    weftComm_t comm = comms[r];
    int n = -1, me = -1;
    EXPECT_EQ(weftCommCount(comm, &n), weftSuccess);
    EXPECT_EQ(weftCommUserRank(comm, &me), weftSuccess);
    EXPECT_EQ(n, kRanks);
    EXPECT_EQ(me, r);

    // value(rank, i) = (rank + 1) * (i + 1): sums, products, extremes are small integers.
    std::vector<float> f(kCount), fout(kCount);
    std::vector<int32_t> v(kCount), vout(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      f[i] = static_cast<float>((r + 1) * static_cast<int>(i + 1));
      v[i] = (r % 2 == 0 ? 1 : -1) * (r + 1) * static_cast<int32_t>(i + 1);  // 1, -2, 3 times i+1
    }
    ASSERT_EQ(weftAllReduce(f.data(), fout.data(), kCount, weftFloat, weftSum, comm, nullptr),
              weftSuccess)
        << last_error(comm);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(fout[i], 6.0f * (i + 1)) << i;
    ASSERT_EQ(weftAllReduce(f.data(), fout.data(), kCount, weftFloat, weftAvg, comm, nullptr),
              weftSuccess);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(fout[i], 2.0f * (i + 1)) << i;
    std::vector<int32_t> inplace = v;
    ASSERT_EQ(weftAllReduce(inplace.data(), inplace.data(), kCount, weftInt32, weftProd, comm,
                            nullptr),
              weftSuccess);
    for (size_t i = 0; i < kCount; ++i) {
      const int32_t k = static_cast<int32_t>(i + 1);
      EXPECT_EQ(inplace[i], -6 * k * k * k) << i;
    }
    ASSERT_EQ(weftAllReduce(v.data(), vout.data(), kCount, weftInt, weftMax, comm, nullptr),
              weftSuccess);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(vout[i], 3 * static_cast<int32_t>(i + 1));
    ASSERT_EQ(weftAllReduce(v.data(), vout.data(), kCount, weftInt, weftMin, comm, nullptr),
              weftSuccess);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(vout[i], -2 * static_cast<int32_t>(i + 1));

    // Allgather: block q holds rank q's f.
    std::vector<float> all(kRanks * kCount, -1.0f);
    ASSERT_EQ(weftAllGather(f.data(), all.data(), kCount, weftFloat, comm, nullptr), weftSuccess);
    for (int q = 0; q < kRanks; ++q) {
      for (size_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(all[q * kCount + i], static_cast<float>((q + 1) * static_cast<int>(i + 1)));
      }
    }
    // Reduce-scatter of a vector of kRanks blocks: block j of rank q is 10 * q + j + i.
    std::vector<int32_t> blocks(kRanks * kCount), mine(kCount, -1);
    for (int j = 0; j < kRanks; ++j) {
      for (size_t i = 0; i < kCount; ++i) {
        blocks[j * kCount + i] = 10 * r + j + static_cast<int32_t>(i);
      }
    }
    ASSERT_EQ(weftReduceScatter(blocks.data(), mine.data(), kCount, weftInt32, weftSum, comm,
                                nullptr),
              weftSuccess);
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_EQ(mine[i], 10 * (0 + 1 + 2) + kRanks * (r + static_cast<int32_t>(i))) << i;
    }
    // Broadcast from rank 2, in place; the others' contents are overwritten.
    std::vector<float> b(kCount, static_cast<float>(-r));
    if (r == 2) std::iota(b.begin(), b.end(), 100.0f);
    ASSERT_EQ(weftBroadcast(b.data(), b.data(), kCount, weftFloat, 2, comm, nullptr), weftSuccess);
    for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(b[i], 100.0f + i) << i;
    EXPECT_EQ(weftBarrier(comm, nullptr), weftSuccess);
    EXPECT_EQ(last_error(comm), "");
  });
  destroy(comms);
}

// Abort and the async error, then shrink around a lost rank: the survivors' new
// communicator works and the old one says why it is unusable.
TEST(CApi, AbortAsyncErrorAndShrink) {
  std::vector<weftComm_t> comms = init_comms(3);
  ASSERT_EQ(comms.size(), 3u);
  weftResult_t async = weftInternalError;
  ASSERT_EQ(weftCommGetAsyncError(comms[0], &async), weftSuccess);
  EXPECT_EQ(async, weftSuccess);
  EXPECT_EQ(weftCommGetAsyncError(comms[0], nullptr), weftInvalidArgument);

  ASSERT_EQ(weftCommDestroy(comms[1]), weftSuccess);  // rank 1 is lost
  std::vector<weftComm_t> next(3, nullptr);
  std::vector<std::vector<int>> dropped(3, std::vector<int>(3, -1));
  std::vector<int> dropped_count(3, -1);
  std::vector<std::thread> threads;
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      EXPECT_EQ(weftCommShrink(comms[r], &next[r], dropped[r].data(), &dropped_count[r]),
                weftSuccess)
          << last_error(comms[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 2}) {
    ASSERT_NE(next[r], nullptr);
    EXPECT_EQ(dropped_count[r], 1);
    EXPECT_EQ(dropped[r][0], 1);
    int n = -1, me = -1;
    EXPECT_EQ(weftCommCount(next[r], &n), weftSuccess);
    EXPECT_EQ(weftCommUserRank(next[r], &me), weftSuccess);
    EXPECT_EQ(n, 2);
    EXPECT_EQ(me, r / 2);
    ASSERT_EQ(weftCommGetAsyncError(comms[r], &async), weftSuccess);
    EXPECT_EQ(async, weftInvalidUsage);
    EXPECT_THAT(last_error(comms[r]), HasSubstr("shrank"));
  }
  on_every_rank(2, [&](int r) {
    weftComm_t comm = next[r * 2];
    int32_t x = r + 1, sum = 0;
    ASSERT_EQ(weftAllReduce(&x, &sum, 1, weftInt32, weftSum, comm, nullptr), weftSuccess)
        << last_error(comm);
    EXPECT_EQ(sum, 3);
  });

  // Abort: the comm refuses calls and says so.
  ASSERT_EQ(weftCommAbort(next[0]), weftSuccess);
  ASSERT_EQ(weftCommGetAsyncError(next[0], &async), weftSuccess);
  EXPECT_EQ(async, weftInvalidUsage);
  EXPECT_THAT(last_error(next[0]), HasSubstr("abort"));
  next[1] = reinterpret_cast<weftComm_t>(0x1234);
  EXPECT_EQ(weftCommShrink(nullptr, &next[1], nullptr, nullptr), weftInvalidUsage);
  EXPECT_EQ(next[1], nullptr);  // set on every failure, a refused handle's too
  for (weftComm_t c : {comms[0], comms[2], next[0], next[2]}) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

// NCCL's watchdog pattern: another thread polls the comm's asynchronous error (and reads its
// message) while the driving thread's calls fail and record theirs. ThreadSanitizer runs this
// (scripts/test-sanitized); unlocked, the message's string was freed under its reader.
TEST(CApi, AsyncErrorPolledFromAnotherThread) {
  std::vector<weftComm_t> comms = init_comms(1);
  ASSERT_EQ(comms.size(), 1u);
  weftComm_t comm = comms[0];
  ASSERT_EQ(weftCommAbort(comm), weftSuccess);
  std::atomic<bool> stop{false};
  std::atomic<int> polls{0};
  std::thread watchdog([&] {
    weftResult_t async = weftSuccess;
    while (!stop.load()) {
      EXPECT_EQ(weftCommGetAsyncError(comm, &async), weftSuccess);
      EXPECT_EQ(async, weftInvalidUsage);
      EXPECT_THAT(std::string(weftGetLastError(comm)), HasSubstr("abort"));
      polls.fetch_add(1);
    }
  });
  int32_t x = 1, y = 0;
  const auto until = absl::Now() + absl::Seconds(20);
  for (int i = 0; i < 20000 && absl::Now() < until; ++i) {
    ASSERT_EQ(weftAllReduce(&x, &y, 1, weftInt32, weftSum, comm, nullptr), weftInvalidUsage);
    EXPECT_THAT(std::string(weftGetLastError(comm)), HasSubstr("abort"));
  }
  stop.store(true);
  watchdog.join();
  EXPECT_GT(polls.load(), 0);
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

TEST(CApi, TimeoutThenInvalidUsage) {
  // WEFT_TIMEOUT is read when the communicator is created; the C API has no per-call timeout.
  ScopedEnv env("WEFT_TIMEOUT", "1");
  std::vector<weftComm_t> comms = init_comms(2);
  ASSERT_EQ(comms.size(), 2u);
  // Rank 1 never calls.
  std::vector<float> x(64, 1.0f), y(64);
  const weft::testing::Stopwatch start;
  EXPECT_EQ(weftAllReduce(x.data(), y.data(), x.size(), weftFloat, weftSum, comms[0], nullptr),
            weftTimeout);
  const absl::Duration took = start.elapsed();
  EXPECT_GE(took, absl::Milliseconds(990));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_THAT(last_error(comms[0]), HasSubstr("rank 0"));
  EXPECT_EQ(last_error(comms[1]), "");
  EXPECT_EQ(weftBarrier(comms[0], nullptr), weftInvalidUsage);
  EXPECT_THAT(last_error(comms[0]), HasSubstr("failed earlier"));
  destroy(comms);
}

}  // namespace

namespace {

// Link health through the C API: after traffic over tcp, every rank sees its links and their
// counters in weftCommHealth, all HEALTHY on loopback, and nothing to poll.
TEST(CApi, HealthSnapshotAndPoll) {
  constexpr int kRanks = 2;
  ScopedEnv tcp("WEFT_TRANSPORT", "tcp");
  ScopedEnv fast("WEFT_HEALTH_INTERVAL_MS", "20");
  std::vector<weftComm_t> comms = init_comms(kRanks);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  on_every_rank(kRanks, [&](int r) {
    weftComm_t comm = comms[r];
    std::vector<float> v(1 << 16, 1.0f);
    ASSERT_EQ(weftAllReduce(v.data(), v.data(), v.size(), weftFloat, weftSum, comm, nullptr),
              weftSuccess);
    weftLinkHealth_t health[8];
    int count = 0;
    // The monitor reads every 20 ms: within a bounded wait it has seen the link and the
    // call's bytes on it (a reading taken between the link's opening and the call's sends
    // has the link with nothing sent yet: under ThreadSanitizer that happens).
    auto link_seen = [&] {
      for (int k = 0; k < std::min(count, 8); ++k) {
        if (std::string(health[k].kind) != "link" || health[k].peer != 1 - r) continue;
        for (int c = 0; c < health[k].counterCount; ++c) {
          if (std::string(health[k].counters[c].name) == "link_bytes_sent" &&
              health[k].counters[c].value > 0) {
            return true;
          }
        }
      }
      return false;
    };
    for (int i = 0; i < 250; ++i) {
      ASSERT_EQ(weftCommHealth(comm, health, 8, &count), weftSuccess);
      if (link_seen()) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_TRUE(link_seen());
    for (int k = 0; k < std::min(count, 8); ++k) {
      EXPECT_EQ(health[k].state, weftHealthy) << health[k].name << ": " << health[k].reason;
      if (std::string(health[k].kind) != "link") continue;
      EXPECT_EQ(std::string(health[k].name), "link to rank " + std::to_string(1 - r));
      bool sent = false;
      for (int c = 0; c < health[k].counterCount; ++c) {
        const std::string name = health[k].counters[c].name;
        if (name == "link_bytes_sent") sent = health[k].counters[c].value > 0;
      }
      EXPECT_TRUE(sent);
    }
    int asked = -1;
    EXPECT_EQ(weftCommHealth(comm, nullptr, 0, &asked), weftSuccess);
    EXPECT_GE(asked, count);
    weftHealthChange_t change;
    int got = -1;
    EXPECT_EQ(weftCommHealthPoll(comm, &change, &got), weftSuccess);
    EXPECT_EQ(got, 0);
    EXPECT_EQ(weftCommHealth(comm, nullptr, 1, &count), weftInvalidArgument);
    EXPECT_EQ(weftCommHealthPoll(comm, nullptr, &got), weftInvalidArgument);
  });
  for (weftComm_t c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

}  // namespace
