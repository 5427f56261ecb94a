// CallMutex (src/base/mutex.hpp): one holder at a time, a waiter that sleeps is woken when
// the holder lets go, and try_lock never waits. The sanitizer builds run these too.
#include "src/base/mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace weft {
namespace {

TEST(CallMutex, TryLockTakesOnlyAFreeLock) {
  CallMutex mu;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  mu.unlock();
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

TEST(CallMutex, OneHolderAtATimeUnderContention) {
  CallMutex mu;
  int counter = 0;  // unguarded but by the lock: a lost update shows as a short count
  int inside = 0;
  bool overlapped = false;
  constexpr int kThreads = 4, kRounds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        mu.lock();
        overlapped |= ++inside != 1;
        ++counter;
        --inside;
        mu.unlock();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, kThreads * kRounds);
  EXPECT_FALSE(overlapped);
}

TEST(CallMutex, AWaiterWakesWhenTheHolderLetsGo) {
  CallMutex mu;
  mu.lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    mu.lock();
    got = true;
    mu.unlock();
  });
  // Long enough for the waiter to find the lock held and sleep on it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  mu.unlock();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!got.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // A waiter never woken fails here; its thread, still joinable, then ends the test binary.
  ASSERT_TRUE(got.load()) << "the waiter slept on through the unlock";
  waiter.join();
  EXPECT_TRUE(mu.try_lock()) << "left held after the waiter let go";
  mu.unlock();
}

}  // namespace
}  // namespace weft
