// The C API (weft/weft.h): result codes and messages, handles that are NULL or were never
// initialised, initialisation and its failures, and the collectives on one rank with exact
// results (small integers); c_api_ranks_test.cc runs them on three ranks. Loopback only;
// every wait is bounded by WEFT_TIMEOUT.
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
#include "src/device/device.hpp"
#include "tests/unit/c_api_harness.hpp"
#include "tests/unit/scoped_env.hpp"

// tests/unit/c_api_header_check.c, built as C99.
extern "C" int weft_c_header_check(void);
extern "C" weftResult_t weft_c_call_raw(weftComm_t comm, int which, int type, int op, float* out);

namespace {

using ::testing::HasSubstr;
using namespace weft::testing;  // c_api_harness.hpp, ScopedEnv

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
  // A stream is refused where this process can use no GPU (on a GPU it is the device path,
  // tests/gpu's). Why depends on the machine (no CUDA built in, no driver, no GPU); every
  // answer names the call and says to pass host buffers.
  if (!weft::device::gpus().ok()) {
    int stream_stand_in = 0;
    void* stream = &stream_stand_in;
    EXPECT_EQ(weftAllReduce(&x, &y, 1, weftFloat, weftSum, comm, stream), weftInvalidArgument);
    EXPECT_THAT(last_error(comm), HasSubstr("weftAllReduce: "));
    EXPECT_THAT(last_error(comm), HasSubstr("host buffers"));
    EXPECT_EQ(weftAllGather(&x, &y, 1, weftFloat, comm, stream), weftInvalidArgument);
    EXPECT_EQ(weftReduceScatter(&x, &y, 1, weftFloat, weftSum, comm, stream), weftInvalidArgument);
    EXPECT_EQ(weftBroadcast(&x, &y, 1, weftFloat, 0, comm, stream), weftInvalidArgument);
    EXPECT_EQ(weftBarrier(comm, stream), weftInvalidArgument);
    EXPECT_THAT(last_error(comm), HasSubstr("weftBarrier: "));
  }

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

}  // namespace
