// The C API (weft/weft.h): result codes and messages, handles that are NULL or were never
// initialised, and the collectives on one rank and on three ranks that are threads of this
// process, with exact results (small integers). Loopback only; every wait is bounded by
// WEFT_TIMEOUT.
#include "weft/weft.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "tests/unit/scoped_env.hpp"

// tests/unit/c_api_header_check.c, built as C99.
extern "C" int weft_c_header_check(void);
extern "C" weftResult_t weft_c_call_raw(weftComm_t comm, int which, int type, int op, float* out);

namespace {

using ::testing::HasSubstr;

using weft::testing::LoopbackEnv;
using weft::testing::ScopedEnv;

const auto* const kLoopbackEnv = ::testing::AddGlobalTestEnvironment(new LoopbackEnv);

std::string last_error(weftComm_t comm) { return weftGetLastError(comm); }

// n ranks as threads; empty (after a test failure) if any rank could not join.
std::vector<weftComm_t> init_comms(int n) {
  weftUniqueId id;
  EXPECT_EQ(weftGetUniqueId(&id), weftSuccess) << last_error(nullptr);
  std::vector<weftComm_t> comms(n, nullptr);
  std::vector<weftResult_t> results(n, weftInternalError);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] = weftCommInitRank(&comms[r], n, id, r);
      errors[r] = last_error(nullptr);  // thread-local: read it on this thread
    });
  }
  for (auto& t : threads) t.join();
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(results[r], weftSuccess) << "rank " << r << ": " << errors[r];
    ok &= results[r] == weftSuccess;
  }
  if (!ok) {
    for (weftComm_t c : comms) weftCommDestroy(c);
    return {};
  }
  return comms;
}

void destroy(const std::vector<weftComm_t>& comms) {
  for (weftComm_t c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

template <typename Fn>
void on_every_rank(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(CApi, Version) {
  int version = -1;
  ASSERT_EQ(weftGetVersion(&version), weftSuccess);
  EXPECT_EQ(version, WEFT_VERSION_CODE);
  EXPECT_EQ(version, WEFT_PROJECT_VERSION_CODE) << "weft.h's WEFT_MAJOR/MINOR/PATCH vs CMake";
  EXPECT_EQ(weftGetVersion(nullptr), weftInvalidArgument);
  EXPECT_THAT(last_error(nullptr), HasSubstr("weftGetVersion: version is NULL"));
}

TEST(CApi, HeaderIsPlainC) { EXPECT_EQ(weft_c_header_check(), 0); }

TEST(CApi, ErrorStrings) {
  std::set<std::string> seen;
  for (int code = weftSuccess; code <= weftTimeout; ++code) {
    const char* s = weftGetErrorString(static_cast<weftResult_t>(code));
    ASSERT_NE(s, nullptr) << code;
    EXPECT_NE(std::string(s), "") << code;
    EXPECT_THAT(s, ::testing::Not(HasSubstr("unknown"))) << code;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 9u) << "every code has its own string";
  EXPECT_STREQ(weftGetErrorString(weftInvalidArgument), "invalid argument");
  EXPECT_THAT(weftGetErrorString(weftTimeout), HasSubstr("timeout"));
}

TEST(CApi, EnumValuesMatchNccl) {
  EXPECT_EQ(weftChar, weftInt8);
  EXPECT_EQ(weftInt, weftInt32);
  EXPECT_EQ(weftHalf, weftFloat16);
  EXPECT_EQ(weftFloat, weftFloat32);
  EXPECT_EQ(weftDouble, weftFloat64);
  EXPECT_EQ(weftBfloat16, 9);
  EXPECT_EQ(weftAvg, 4);
  EXPECT_EQ(weftTimeout, 8);
}

// Every call on `comm` that takes a communicator; all must answer weftInvalidUsage.
void expect_every_call_refused(weftComm_t comm) {
  float x = 1.0f, y = 0.0f;
  int n = -1;
  EXPECT_EQ(weftCommCount(comm, &n), weftInvalidUsage);
  EXPECT_EQ(weftCommUserRank(comm, &n), weftInvalidUsage);
  EXPECT_EQ(n, -1);
  EXPECT_EQ(weftAllReduce(&x, &y, 1, weftFloat, weftSum, comm, nullptr), weftInvalidUsage);
  EXPECT_EQ(weftAllGather(&x, &y, 1, weftFloat, comm, nullptr), weftInvalidUsage);
  EXPECT_EQ(weftReduceScatter(&x, &y, 1, weftFloat, weftSum, comm, nullptr), weftInvalidUsage);
  EXPECT_EQ(weftBroadcast(&x, &y, 1, weftFloat, 0, comm, nullptr), weftInvalidUsage);
  EXPECT_EQ(weftBarrier(comm, nullptr), weftInvalidUsage);
  EXPECT_EQ(y, 0.0f);
}

TEST(CApi, NullCommIsInvalidUsage) {
  expect_every_call_refused(nullptr);
  EXPECT_THAT(last_error(nullptr), HasSubstr("weftBarrier: the communicator is NULL"));
  EXPECT_EQ(weftCommDestroy(nullptr), weftSuccess);
}

TEST(CApi, UninitialisedHandleIsInvalidUsage) {
  for (unsigned char fill : {0x00, 0xab}) {
    alignas(64) unsigned char garbage[512];
    std::memset(garbage, fill, sizeof garbage);
    auto comm = reinterpret_cast<weftComm_t>(garbage);
    expect_every_call_refused(comm);
    EXPECT_THAT(last_error(comm), HasSubstr("not an initialised communicator"));
    EXPECT_EQ(weftCommDestroy(comm), weftInvalidUsage);
  }
}

TEST(CApi, NullOutPointersAreInvalidArgument) {
  weftUniqueId id;
  ASSERT_EQ(weftGetUniqueId(&id), weftSuccess) << last_error(nullptr);
  EXPECT_EQ(weftGetUniqueId(nullptr), weftInvalidArgument);
  EXPECT_EQ(weftCommInitRank(nullptr, 1, id, 0), weftInvalidArgument);
  EXPECT_THAT(last_error(nullptr), HasSubstr("weftCommInitRank: the comm out-pointer is NULL"));
  EXPECT_EQ(weftCommInitFromEnv(nullptr), weftInvalidArgument);

  std::vector<weftComm_t> comms = init_comms(1);
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(weftCommCount(comms[0], nullptr), weftInvalidArgument);
  EXPECT_EQ(weftCommUserRank(comms[0], nullptr), weftInvalidArgument);
  EXPECT_THAT(last_error(comms[0]), HasSubstr("weftCommUserRank: rank is NULL"));
  destroy(comms);
}

TEST(CApi, InitFailuresLeaveNullAndAMessage) {
  weftUniqueId id;
  ASSERT_EQ(weftGetUniqueId(&id), weftSuccess) << last_error(nullptr);
  weftComm_t comm = reinterpret_cast<weftComm_t>(0x1);
  EXPECT_EQ(weftCommInitRank(&comm, 2, id, 5), weftInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_THAT(last_error(nullptr), HasSubstr("rank 5 is not within a communicator of 2 ranks"));

  // The message is this thread's: another thread has seen no failure.
  std::string elsewhere = "not run";
  std::thread([&] { elsewhere = last_error(nullptr); }).join();
  EXPECT_EQ(elsewhere, "");

  weftUniqueId zeros;
  std::memset(&zeros, 0, sizeof zeros);
  EXPECT_EQ(weftCommInitRank(&comm, 1, zeros, 0), weftInvalidArgument);
  EXPECT_THAT(last_error(nullptr), HasSubstr("not a weft unique id"));

  ScopedEnv env("WEFT_TRANSPORT", "pigeon");
  EXPECT_EQ(weftCommInitRank(&comm, 1, id, 0), weftInvalidArgument);
  EXPECT_THAT(last_error(nullptr), HasSubstr("WEFT_TRANSPORT=pigeon"));
  EXPECT_EQ(comm, nullptr);
}

// A loopback port nothing listens on right now (the kernel's pick for a socket we close).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(CApi, InitFromEnv) {
  ScopedEnv rank("WEFT_RANK", "0"), size("WEFT_SIZE", "1");
  weftComm_t comm = reinterpret_cast<weftComm_t>(0x1);
  {
    ScopedEnv coordinator("WEFT_COORDINATOR", nullptr);
    EXPECT_EQ(weftCommInitFromEnv(&comm), weftInvalidUsage);
    EXPECT_EQ(comm, nullptr);
    EXPECT_THAT(last_error(nullptr), HasSubstr("set WEFT_COORDINATOR=host:port"));
  }
  const std::string where = "127.0.0.1:" + std::to_string(free_port());
  ScopedEnv coordinator("WEFT_COORDINATOR", where.c_str());
  ASSERT_EQ(weftCommInitFromEnv(&comm), weftSuccess) << last_error(nullptr);
  int n = -1;
  EXPECT_EQ(weftCommCount(comm, &n), weftSuccess);
  EXPECT_EQ(n, 1);
  int32_t x = 41, y = 0;
  EXPECT_EQ(weftAllReduce(&x, &y, 1, weftInt32, weftSum, comm, nullptr), weftSuccess);
  EXPECT_EQ(y, 41);
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

TEST(CApi, OneRank) {
  std::vector<weftComm_t> comms = init_comms(1);
  ASSERT_EQ(comms.size(), 1u);
  weftComm_t comm = comms[0];
  int n = -1, r = -1;
  ASSERT_EQ(weftCommCount(comm, &n), weftSuccess);
  ASSERT_EQ(weftCommUserRank(comm, &r), weftSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(last_error(comm), "");

  const std::vector<float> in = {1, -2, 3, 40, 5};
  std::vector<float> out(in.size(), 0.0f);
  for (weftRedOp_t op : {weftSum, weftProd, weftMax, weftMin, weftAvg}) {
    std::fill(out.begin(), out.end(), 0.0f);
    ASSERT_EQ(weftAllReduce(in.data(), out.data(), in.size(), weftFloat, op, comm, nullptr),
              weftSuccess)
        << last_error(comm);
    EXPECT_EQ(out, in) << "op " << op;
  }
  std::vector<int32_t> ints = {7, -7, 9};
  ASSERT_EQ(weftAllReduce(ints.data(), ints.data(), 3, weftInt32, weftAvg, comm, nullptr),
            weftSuccess);
  EXPECT_EQ(ints, (std::vector<int32_t>{7, -7, 9}));
  std::fill(out.begin(), out.end(), 0.0f);
  ASSERT_EQ(weftAllGather(in.data(), out.data(), in.size(), weftFloat, comm, nullptr), weftSuccess);
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0.0f);
  ASSERT_EQ(weftReduceScatter(in.data(), out.data(), in.size(), weftFloat, weftSum, comm, nullptr),
            weftSuccess);
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0.0f);
  ASSERT_EQ(weftBroadcast(in.data(), out.data(), in.size(), weftFloat, 0, comm, nullptr),
            weftSuccess);
  EXPECT_EQ(out, in);
  EXPECT_EQ(weftBarrier(comm, nullptr), weftSuccess);
  EXPECT_EQ(last_error(comm), "");
  destroy(comms);
}

TEST(CApi, RefusedArgumentsLeaveTheCommUsable) {
  std::vector<weftComm_t> comms = init_comms(1);
  ASSERT_EQ(comms.size(), 1u);
  weftComm_t comm = comms[0];
  float x = 2.0f, y = 0.0f;
  int stream_stand_in = 0;
  void* stream = &stream_stand_in;

  EXPECT_EQ(weftAllReduce(&x, &y, 1, weftFloat, weftSum, comm, stream), weftInvalidArgument);
  EXPECT_THAT(last_error(comm), HasSubstr("weftAllReduce: stream must be NULL"));
  EXPECT_EQ(weftAllGather(&x, &y, 1, weftFloat, comm, stream), weftInvalidArgument);
  EXPECT_EQ(weftReduceScatter(&x, &y, 1, weftFloat, weftSum, comm, stream), weftInvalidArgument);
  EXPECT_EQ(weftBroadcast(&x, &y, 1, weftFloat, 0, comm, stream), weftInvalidArgument);
  EXPECT_EQ(weftBarrier(comm, stream), weftInvalidArgument);
  EXPECT_THAT(last_error(comm), HasSubstr("weftBarrier: stream must be NULL"));

  // Outside the enums, including a type that would wrap into the enum as a uint8_t. The calls
  // are made from C: in C++ an enum cannot hold such a value.
  for (int bad : {99, 256 + weftFloat, -1}) {
    for (int which = 0; which < 4; ++which) {
      EXPECT_EQ(weft_c_call_raw(comm, which, bad, weftSum, &y), weftInvalidArgument) << which;
      EXPECT_THAT(last_error(comm), HasSubstr("unknown data type " + std::to_string(bad)));
    }
    for (int which : {0, 2}) {
      EXPECT_EQ(weft_c_call_raw(comm, which, weftFloat, bad, &y), weftInvalidArgument) << which;
      EXPECT_THAT(last_error(comm), HasSubstr("unknown reduction op " + std::to_string(bad)));
    }
  }
  ASSERT_EQ(weft_c_call_raw(comm, 0, weftFloat, weftMax, &y), weftSuccess);
  EXPECT_EQ(y, 1.0f);
  y = 0.0f;
  EXPECT_EQ(weftAllReduce(&x, nullptr, 1, weftFloat, weftSum, comm, nullptr), weftInvalidArgument);
  EXPECT_THAT(last_error(comm), HasSubstr("recv buffer is null"));
  EXPECT_EQ(weftBroadcast(&x, &y, 1, weftFloat, 1, comm, nullptr), weftInvalidArgument);
  EXPECT_THAT(last_error(comm), HasSubstr("root 1 is not a rank"));
  EXPECT_EQ(y, 0.0f);

  ASSERT_EQ(weftAllReduce(&x, &y, 1, weftFloat, weftSum, comm, nullptr), weftSuccess);
  EXPECT_EQ(y, 2.0f);
  EXPECT_THAT(last_error(comm), HasSubstr("root 1")) << "a success keeps the last message";
  destroy(comms);
}

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
  EXPECT_EQ(weftCommShrink(nullptr, &next[1], nullptr, nullptr), weftInvalidUsage);
  for (weftComm_t c : {comms[0], comms[2], next[0], next[2]}) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

TEST(CApi, TimeoutThenInvalidUsage) {
  // WEFT_TIMEOUT is read when the communicator is created; the C API has no per-call timeout.
  ScopedEnv env("WEFT_TIMEOUT", "1");
  std::vector<weftComm_t> comms = init_comms(2);
  ASSERT_EQ(comms.size(), 2u);
  // Rank 1 never calls.
  std::vector<float> x(64, 1.0f), y(64);
  const absl::Time start = absl::Now();
  EXPECT_EQ(weftAllReduce(x.data(), y.data(), x.size(), weftFloat, weftSum, comms[0], nullptr),
            weftTimeout);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(990));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_THAT(last_error(comms[0]), HasSubstr("rank 0"));
  EXPECT_EQ(last_error(comms[1]), "");
  EXPECT_EQ(weftBarrier(comms[0], nullptr), weftInvalidUsage);
  EXPECT_THAT(last_error(comms[0]), HasSubstr("failed earlier"));
  destroy(comms);
}

}  // namespace
