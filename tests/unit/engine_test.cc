// Calls ordered on a stream (src/engine.hpp), where there is no GPU: a StandInStream stands
// in for the caller's CUDA stream (WEFT_DEVICE_STAND_IN). Each call must return before the
// stream reaches it, run in the order the calls were made once it does, hold the stream's
// later work until its results are in place, and, when it fails after returning, report
// the failure as the communicator's async error and still let the stream go on.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/device/copier.hpp"
#include "tests/unit/c_api_harness.hpp"

namespace weft::testing {
namespace {

using ::testing::HasSubstr;

// Blocks `stream` until open() (a kernel still running when the collective is called).
class Gate {
 public:
  explicit Gate(device::StandInStream& stream) {
    stream.enqueue([this] {
      while (!open_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  void open() { open_.store(true); }

 private:
  std::atomic<bool> open_{false};
};

constexpr size_t kCount = 3001;  // floats: three pieces of 4 KiB

// Each test runs over both paths of a call ordered on a stream: the staging buffers and the
// host path (WEFT_CUDA_IPC=off), and the cuda_ipc windows (on; ranks as threads share one
// process, and the stand-in's windows are memfds).
class Engine : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Paths, Engine, ::testing::Values("off", "on"),
                         [](const auto& info) {
                           return std::string(info.param) == "on" ? "CudaIpc" : "Staging";
                         });

TEST_P(Engine, ACallReturnsBeforeItsStreamReachesIt) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  ScopedEnv path("WEFT_CUDA_IPC", GetParam());
  const int n = 3;
  std::vector<weftComm_t> comms = init_comms(n);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  on_every_rank(n, [&](int r) {
    device::StandInStream stream;
    std::vector<float> in(kCount), out(kCount, -1.0f);
    Gate gate(stream);
    // The input is written by the stream, behind the gate: a call that ran at once would
    // reduce zeros.
    std::vector<float> values(kCount);
    for (size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>((r + 1) * (i % 5 + 1));
    stream.enqueue([&] { std::memcpy(in.data(), values.data(), kCount * sizeof(float)); });
    ASSERT_EQ(weftAllReduce(in.data(), out.data(), kCount, weftFloat, weftSum, comms[r], &stream),
              weftSuccess)
        << last_error(comms[r]);
    // Returned with the stream still held at the gate: nothing has run.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(out[0], -1.0f);
    gate.open();
    stream.synchronize();
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(out[i], static_cast<float>(6 * (i % 5 + 1))) << "element " << i;
    }
  });
  destroy(comms);
}

TEST_P(Engine, CallsRunInTheOrderMadeAndAHostCallWaitsForThem) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  ScopedEnv path("WEFT_CUDA_IPC", GetParam());
  ScopedEnv piece("WEFT_STAGING_BYTES", "4096");  // several pieces a call (the least)
  const int n = 2, calls = 12;
  std::vector<weftComm_t> comms = init_comms(n);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  on_every_rank(n, [&](int r) {
    device::StandInStream stream;
    Gate gate(stream);
    // Each call reduces, in place, what the one before left: only the order made gives
    // 3 * 2^(calls - 1).
    std::vector<float> x(kCount, static_cast<float>(r + 1));
    for (int c = 0; c < calls; ++c) {
      ASSERT_EQ(weftAllReduce(x.data(), x.data(), kCount, weftFloat, weftSum, comms[r], &stream),
                weftSuccess)
          << last_error(comms[r]);
    }
    gate.open();
    // A call on host buffers and no stream waits for every queued call first.
    int32_t one = 1, ranks = 0;
    ASSERT_EQ(weftAllReduce(&one, &ranks, 1, weftInt32, weftSum, comms[r], nullptr), weftSuccess)
        << last_error(comms[r]);
    EXPECT_EQ(ranks, n);
    stream.synchronize();
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(x[i], 3.0f * (1 << (calls - 1))) << i;
  });
  destroy(comms);
}

TEST_P(Engine, CallsOnTwoStreamsTakeTurnsWithTheStagingBuffers) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  ScopedEnv path("WEFT_CUDA_IPC", GetParam());
  ScopedEnv piece("WEFT_STAGING_BYTES", "4096");
  const int n = 2, calls = 8;
  std::vector<weftComm_t> comms = init_comms(n);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  on_every_rank(n, [&](int r) {
    device::StandInStream one, two;
    // Calls alternate between the streams, each its own buffers: the stream of a call must
    // wait until the call before, on the other stream, has copied its last piece out.
    std::vector<std::vector<int32_t>> in(calls), out(calls);
    for (int c = 0; c < calls; ++c) {
      in[c].assign(kCount, (r + 1) * (c + 1));
      out[c].assign(kCount, -1);
      ASSERT_EQ(weftAllReduce(in[c].data(), out[c].data(), kCount, weftInt32, weftSum, comms[r],
                              c % 2 == 0 ? &one : &two),
                weftSuccess)
          << last_error(comms[r]);
    }
    one.synchronize();
    two.synchronize();
    for (int c = 0; c < calls; ++c) {
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out[c][i], 3 * (c + 1)) << c << " " << i;
    }
  });
  destroy(comms);
}

TEST_P(Engine, DestroyingACommunicatorFinishesItsQueuedCalls) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  ScopedEnv path("WEFT_CUDA_IPC", GetParam());
  const int n = 2;
  std::vector<weftComm_t> comms = init_comms(n);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  on_every_rank(n, [&](int r) {
    device::StandInStream stream;
    std::vector<int32_t> in(kCount, r + 1), out(kCount, 0);
    ASSERT_EQ(weftAllReduce(in.data(), out.data(), kCount, weftInt32, weftSum, comms[r], &stream),
              weftSuccess);
    EXPECT_EQ(weftCommDestroy(comms[r]), weftSuccess);
    stream.synchronize();
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out[i], 3) << i;
  });
}

TEST_P(Engine, AFailureAfterTheCallReturnedIsTheAsyncErrorAndTheStreamGoesOn) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  ScopedEnv path("WEFT_CUDA_IPC", GetParam());
  ScopedEnv timeout("WEFT_TIMEOUT", "1");
  const int n = 2;
  std::vector<weftComm_t> comms = init_comms(n);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  // One call every rank makes (the first sets the path up with every rank); then rank 1
  // makes no call: rank 0's, queued, runs out of time after it returned.
  device::StandInStream stream;
  std::vector<float> in(kCount, 1.0f), out(kCount, 0.0f);
  on_every_rank(n, [&](int r) {
    device::StandInStream first;
    std::vector<float> mine(kCount, 1.0f), sum(kCount, 0.0f);
    ASSERT_EQ(weftAllReduce(mine.data(), sum.data(), kCount, weftFloat, weftSum, comms[r], &first),
              weftSuccess);
    first.synchronize();
    ASSERT_EQ(sum[kCount - 1], 2.0f);
  });
  ASSERT_EQ(weftAllReduce(in.data(), out.data(), kCount, weftFloat, weftSum, comms[0], &stream),
            weftSuccess);
  bool after = false;
  stream.enqueue([&] { after = true; });
  const auto start = std::chrono::steady_clock::now();
  stream.synchronize();  // released, not held forever
  EXPECT_TRUE(after);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  weftResult_t async = weftSuccess;
  ASSERT_EQ(weftCommGetAsyncError(comms[0], &async), weftSuccess);
  EXPECT_NE(async, weftSuccess);
  // Later calls are refused with what broke the communicator.
  EXPECT_NE(weftAllReduce(in.data(), out.data(), kCount, weftFloat, weftSum, comms[0], &stream),
            weftSuccess);
  EXPECT_THAT(last_error(comms[0]), HasSubstr("failed earlier"));
  destroy(comms);
}

// One rank: no collective runs, the stream copies (Comm::queue_local). A call on another
// stream still waits for the call before it: here the second reads what the first writes.
TEST(EngineOneRank, ACallOnAnotherStreamWaitsForTheCallBefore) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  std::vector<weftComm_t> comms = init_comms(1);
  ASSERT_EQ(comms.size(), 1u);
  device::StandInStream first, second;
  std::vector<float> in(kCount), middle(kCount, -1.0f), out(kCount, -2.0f);
  for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>(i % 7 + 1);
  Gate gate(first);
  ASSERT_EQ(weftAllReduce(in.data(), middle.data(), kCount, weftFloat, weftSum, comms[0], &first),
            weftSuccess)
      << last_error(comms[0]);
  ASSERT_EQ(weftAllGather(middle.data(), out.data(), kCount, weftFloat, comms[0], &second),
            weftSuccess)
      << last_error(comms[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(middle[0], -1.0f);  // held at the gate
  EXPECT_EQ(out[0], -2.0f);     // and so is the call on the other stream
  gate.open();
  first.synchronize();
  second.synchronize();
  for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(out[i], in[i]) << "element " << i;
  destroy(comms);
}

}  // namespace
}  // namespace weft::testing
