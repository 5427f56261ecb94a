// The C++ API's error cases and its one-rank behaviour, with communicators whose ranks are
// threads of this process (shm works between them). Every error is checked by its code and
// by what its message names. Loopback only; every wait is bounded by WEFT_TIMEOUT=10 or a
// per-call timeout, and the timeout test asserts how long it took.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "tests/unit/scoped_env.hpp"
#include "weft/weft.hpp"
#include "tests/unit/stopwatch.hpp"

namespace weft {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using weft::testing::LoopbackEnv;
using weft::testing::ScopedEnv;

const auto* const kLoopbackEnv = ::testing::AddGlobalTestEnvironment(new LoopbackEnv);

using weft::testing::Comms;
using weft::testing::make_comms;

// Runs fn(rank) on one thread per rank.
template <typename Fn>
void on_every_rank(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

void expect_error(const absl::Status& s, absl::StatusCode code, const std::string& names) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(names));
}

class OneRank : public ::testing::Test {
 protected:
  void SetUp() override {
    Comms comms = make_comms(1);
    ASSERT_EQ(comms.size(), 1u);
    comm_ = std::move(comms[0]);
  }
  std::unique_ptr<Communicator> comm_;
  std::vector<float> send_ = std::vector<float>(8, 1.0f);
  std::vector<float> recv_ = std::vector<float>(8, 0.0f);
};

TEST_F(OneRank, NullBuffersWithACountAreInvalid) {
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  const float* send = send_.data();
  float* recv = recv_.data();
  expect_error(comm_->allreduce(send, nullptr, 8, DataType::kFloat32), kInvalid,
               "allreduce on rank 0: recv buffer is null but count is 8");
  expect_error(comm_->allreduce(nullptr, recv, 8, DataType::kFloat32), kInvalid,
               "allreduce on rank 0: send buffer is null but count is 8");
  expect_error(comm_->allgather(nullptr, recv, 8, DataType::kFloat32), kInvalid,
               "allgather on rank 0: send buffer is null");
  expect_error(comm_->allgather(send, nullptr, 8, DataType::kFloat32), kInvalid,
               "allgather on rank 0: recv buffer is null");
  expect_error(comm_->reduce_scatter(nullptr, recv, 8, DataType::kFloat32), kInvalid,
               "reduce_scatter on rank 0: send buffer is null");
  expect_error(comm_->reduce_scatter(send, nullptr, 8, DataType::kFloat32), kInvalid,
               "reduce_scatter on rank 0: recv buffer is null");
  // The root reads its send buffer.
  expect_error(comm_->broadcast(nullptr, recv, 8, DataType::kFloat32), kInvalid,
               "broadcast on rank 0: send buffer is null");
  expect_error(comm_->broadcast(send, nullptr, 8, DataType::kFloat32), kInvalid,
               "broadcast on rank 0: recv buffer is null");
}

TEST_F(OneRank, CountZeroWithNullBuffersIsOk) {
  EXPECT_TRUE(comm_->allreduce(nullptr, nullptr, 0, DataType::kFloat32).ok());
  EXPECT_TRUE(comm_->allgather(nullptr, nullptr, 0, DataType::kInt8).ok());
  EXPECT_TRUE(comm_->reduce_scatter(nullptr, nullptr, 0, DataType::kFloat64).ok());
  EXPECT_TRUE(comm_->broadcast(nullptr, nullptr, 0, DataType::kUint64).ok());
  EXPECT_TRUE(comm_->barrier().ok());
}

TEST_F(OneRank, UnknownTypeAndOpAreInvalid) {
  const auto bad_type = static_cast<DataType>(42);
  for (const absl::Status& s :
       {comm_->allreduce(send_.data(), recv_.data(), 8, bad_type),
        comm_->allgather(send_.data(), recv_.data(), 8, bad_type),
        comm_->reduce_scatter(send_.data(), recv_.data(), 8, bad_type),
        comm_->broadcast(send_.data(), recv_.data(), 8, bad_type)}) {
    expect_error(s, absl::StatusCode::kInvalidArgument, "unknown data type 42");
  }
  AllreduceOptions ar;
  ar.op = static_cast<ReduceOp>(9);
  expect_error(comm_->allreduce(send_.data(), recv_.data(), 8, DataType::kFloat32, ar),
               absl::StatusCode::kInvalidArgument, "allreduce: unknown reduction op 9");
  ReduceScatterOptions rs;
  rs.op = static_cast<ReduceOp>(9);
  expect_error(comm_->reduce_scatter(send_.data(), recv_.data(), 8, DataType::kFloat32, rs),
               absl::StatusCode::kInvalidArgument, "reduce_scatter: unknown reduction op 9");
}

TEST_F(OneRank, BroadcastRootOutsideTheCommunicatorIsInvalid) {
  for (int root : {-1, 1}) {
    BroadcastOptions options;
    options.root = root;
    expect_error(comm_->broadcast(send_.data(), recv_.data(), 8, DataType::kFloat32, options),
                 absl::StatusCode::kInvalidArgument,
                 "broadcast: root " + std::to_string(root) + " is not a rank of 0..0");
  }
}

TEST_F(OneRank, CountsThatOverflowAByteCountAreInvalid) {
  const size_t huge = SIZE_MAX / 2;
  const std::string count = std::to_string(huge);
  expect_error(comm_->allgather(send_.data(), recv_.data(), huge, DataType::kFloat32),
               absl::StatusCode::kInvalidArgument,
               "allgather: count " + count + " of float overflows a byte count");
  expect_error(comm_->reduce_scatter(send_.data(), recv_.data(), huge, DataType::kInt32),
               absl::StatusCode::kInvalidArgument,
               "reduce_scatter: count " + count + " of int32 overflows a byte count");
  expect_error(comm_->allreduce(send_.data(), recv_.data(), huge, DataType::kFloat64),
               absl::StatusCode::kInvalidArgument, "overflows a byte count");
}

TEST_F(OneRank, UnknownAlgorithmIsInvalidAndListsTheKnownOnes) {
  AllreduceOptions options;
  options.algorithm = "bogus";
  expect_error(comm_->allreduce(send_.data(), recv_.data(), 8, DataType::kFloat32, options),
               absl::StatusCode::kInvalidArgument,
               "no allreduce algorithm named 'bogus'; known: ring, recursive_doubling");
  BroadcastOptions bcast;
  bcast.algorithm = "tree";
  expect_error(comm_->broadcast(send_.data(), recv_.data(), 8, DataType::kFloat32, bcast),
               absl::StatusCode::kInvalidArgument, "known: chain");
  // A refused call leaves the communicator usable.
  EXPECT_TRUE(comm_->allreduce(send_.data(), recv_.data(), 8, DataType::kFloat32).ok());
  EXPECT_EQ(recv_, send_);
}

TEST(Create, BadEnvironmentVariablesAreInvalidAndNamed) {
  auto id = make_unique_id();  // before the bad values: it reads WEFT_TIMEOUT too
  ASSERT_TRUE(id.ok()) << id.status();
  const std::pair<const char*, const char*> cases[] = {
      {"WEFT_ALGORITHM", "allreduce=bogus"}, {"WEFT_ALGORITHM", "nonsense"},
      {"WEFT_TIMEOUT", "soon"},              {"WEFT_TIMEOUT", "-1"},
      {"WEFT_TRANSPORT", "pigeon"},
      // Sizes out of range are refused before anything is allocated (they used to map a
      // 64 TiB ring, or throw std::bad_alloc out of the library).
      {"WEFT_SHM_RING_BYTES", "99999999999999"}, {"WEFT_SHM_RING_BYTES", "4096"},
      {"WEFT_RELAY_BYTES", "999999999999999"},   {"WEFT_RELAY_BYTES", "12abc"},
      {"WEFT_SMALL_MESSAGE_BYTES", "18446744073709551615"},
  };
  for (const auto& [name, value] : cases) {
    ScopedEnv env(name, value);
    auto comm = Communicator::create(*id, 0, 1);
    ASSERT_FALSE(comm.ok()) << name << "=" << value;
    expect_error(comm.status(), absl::StatusCode::kInvalidArgument, name);
    EXPECT_THAT(std::string(comm.status().message()), HasSubstr(value));
  }
}

TEST(Create, SizesOutOfRangeNameTheRangeAndTheMemory) {
  auto id = make_unique_id();
  ASSERT_TRUE(id.ok()) << id.status();
  ScopedEnv env("WEFT_SHM_RING_BYTES", "99999999999999");
  auto comm = Communicator::create(*id, 0, 1);
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(std::string(comm.status().message()),
              AllOf(HasSubstr("WEFT_SHM_RING_BYTES=99999999999999 (90.9 TiB)"),
                    HasSubstr("64 KiB..256 MiB"), HasSubstr("two rings of this size")));
}

TEST(Create, RankOutsideTheSizeIsInvalid) {
  auto id = make_unique_id();
  ASSERT_TRUE(id.ok()) << id.status();
  for (auto [rank, size] : {std::pair{1, 1}, {-1, 2}, {0, 0}}) {
    auto comm = Communicator::create(*id, rank, size);
    ASSERT_FALSE(comm.ok());
    expect_error(comm.status(), absl::StatusCode::kInvalidArgument,
                 "rank " + std::to_string(rank) + " is not within a communicator of " +
                     std::to_string(size) + " ranks");
  }
}

TEST(ThreeRanks, PerRankCountOverflowCountsTheRanks) {
  Comms comms = make_comms(3);
  ASSERT_EQ(comms.size(), 3u);
  // Fits in a byte count for one rank's block, not for three of them.
  const size_t count = SIZE_MAX / 2 / sizeof(float) / 2;
  std::vector<float> buf(1);
  on_every_rank(3, [&](int r) {
    expect_error(comms[r]->allgather(buf.data(), buf.data(), count, DataType::kFloat32),
                 absl::StatusCode::kInvalidArgument, "overflows a byte count");
    expect_error(comms[r]->reduce_scatter(buf.data(), buf.data(), count, DataType::kFloat32),
                 absl::StatusCode::kInvalidArgument, "overflows a byte count");
  });
}

TEST(TwoRanks, BroadcastReadsSendOnTheRootOnly) {
  Comms comms = make_comms(2);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<std::vector<int32_t>> recv(2, std::vector<int32_t>(5, 0));
  const std::vector<int32_t> data = {1, -2, 3, -4, 5};
  on_every_rank(2, [&](int r) {
    BroadcastOptions options;
    options.root = 1;
    options.timeout = absl::Seconds(5);
    const void* send = r == 1 ? data.data() : nullptr;
    EXPECT_TRUE(comms[r]->broadcast(send, recv[r].data(), 5, DataType::kInt32, options).ok());
  });
  EXPECT_EQ(recv[0], data);
  EXPECT_EQ(recv[1], data);
}

// abort() from another thread ends a collective stuck on a silent peer long before its
// deadline, says so in async_error(), and the peer that comes late fails fast too.
TEST(TwoRanks, AbortFromAnotherThreadEndsAStuckCollective) {
  Comms comms = make_comms(2);
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_TRUE(comms[0]->async_error().ok());
  std::vector<float> buf(1000, 1.0f);
  absl::Status stuck;
  absl::Duration took;
  std::thread caller([&] {
    const weft::testing::Stopwatch start;
    stuck = comms[0]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32);
    took = start.elapsed();
  });
  absl::SleepFor(absl::Milliseconds(300));  // rank 1 never calls: rank 0 waits
  comms[0]->abort();
  caller.join();
  EXPECT_EQ(stuck.code(), absl::StatusCode::kAborted) << stuck;
  EXPECT_LT(took, absl::Seconds(2)) << "WEFT_TIMEOUT is 10 s here";
  EXPECT_EQ(comms[0]->async_error().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(comms[0]->barrier().code(), absl::StatusCode::kFailedPrecondition);
  // Rank 1 never linked to rank 0, so it learns of the abort only from its own deadline.
  AllreduceOptions short_wait;
  short_wait.timeout = absl::Seconds(1);
  const weft::testing::Stopwatch start;
  const absl::Status late =
      comms[1]->allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, short_wait);
  EXPECT_FALSE(late.ok());
  EXPECT_LT(start.elapsed(), absl::Seconds(3)) << late;
}

// link_stats() may be called from any thread (a health monitor) while the ranks move data
// over their links and then close them on a failure. Under ThreadSanitizer (scripts/
// test-sanitized) a counter written without an atomic, or a link reset while another thread
// reads it, is reported here.
TEST(TwoRanks, LinkStatsFromAnotherThreadWhileLinksComeAndGo) {
  Comms comms = make_comms(2);
  ASSERT_EQ(comms.size(), 2u);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> largest_seen{0};
  std::thread monitor([&] {
    while (!done.load()) {
      for (const auto& comm : comms) {
        for (const LinkStats& l : comm->link_stats()) {
          largest_seen.store(std::max(largest_seen.load(), l.bytes_sent));
        }
      }
    }
  });
  std::vector<std::vector<float>> bufs(2, std::vector<float>(4096, 1.0f));
  on_every_rank(2, [&](int r) {
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(comms[r]->allreduce(bufs[r].data(), bufs[r].data(), bufs[r].size(),
                                      DataType::kFloat32).ok());
    }
  });
  // Rank 0 times out alone and closes its links while the monitor reads them. (Rank 1's
  // call that follows may still complete from what rank 0 sent before it gave up.)
  AllreduceOptions short_wait;
  short_wait.timeout = absl::Milliseconds(200);
  EXPECT_FALSE(comms[0]->allreduce(bufs[0].data(), bufs[0].data(), 4, DataType::kFloat32,
                                   short_wait).ok());
  (void)comms[1]->allreduce(bufs[1].data(), bufs[1].data(), 4, DataType::kFloat32, short_wait);
  done.store(true);
  monitor.join();
  EXPECT_GT(largest_seen.load(), 0u) << "the monitor never saw a byte sent";
  EXPECT_TRUE(comms[0]->link_stats().empty()) << "a failed communicator closed its links";
}

TEST(TwoRanks, AfterATimeoutTheCommunicatorRefusesCalls) {
  Comms comms = make_comms(2);
  ASSERT_EQ(comms.size(), 2u);
  // Rank 1 never calls: rank 0 waits out its own timeout.
  std::vector<float> send(1024, 1.0f), recv(1024);
  AllreduceOptions options;
  options.timeout = absl::Milliseconds(300);
  const weft::testing::Stopwatch start;
  const absl::Status s =
      comms[0]->allreduce(send.data(), recv.data(), send.size(), DataType::kFloat32, options);
  const absl::Duration took = start.elapsed();
  expect_error(s, absl::StatusCode::kDeadlineExceeded, "rank 0");
  EXPECT_GE(took, absl::Milliseconds(290));
  EXPECT_LT(took, absl::Milliseconds(300) + absl::Seconds(2));

  const absl::Status again =
      comms[0]->allreduce(send.data(), recv.data(), send.size(), DataType::kFloat32, options);
  expect_error(again, absl::StatusCode::kFailedPrecondition, "failed earlier");
  EXPECT_THAT(std::string(again.message()),
              AllOf(HasSubstr("allreduce on rank 0"), HasSubstr("create a new one")));
  expect_error(comms[0]->barrier(), absl::StatusCode::kFailedPrecondition, "failed earlier");
}

// On one rank every collective is a copy (the reduction of one value is that value), for
// every type, op and algorithm, in place and out of place.
TEST_F(OneRank, EveryCollectiveCopiesOnOneRank) {
  constexpr size_t kCount = 37;
  for (int t = 0; t < kNumDataTypes; ++t) {
    const auto type = static_cast<DataType>(t);
    const size_t bytes = kCount * size_of(type);
    // Bytes below 0x40 make finite values of every float type.
    std::vector<uint8_t> in(bytes);
    for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>((i * 7 + 3 + t) % 0x40);
    auto check = [&](const absl::Status& s, const std::vector<uint8_t>& out, const char* what) {
      EXPECT_TRUE(s.ok()) << what << " " << name_of(type) << ": " << s;
      EXPECT_EQ(out, in) << what << " " << name_of(type);
    };
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "in place" : "out of place");
      for (int o = 0; o < kNumReduceOps; ++o) {
        for (const char* algorithm : {"", "ring", "recursive_doubling"}) {
          AllreduceOptions options;
          options.op = static_cast<ReduceOp>(o);
          options.algorithm = algorithm;
          std::vector<uint8_t> out = in_place ? in : std::vector<uint8_t>(bytes, 0xff);
          const void* send = in_place ? out.data() : in.data();
          check(comm_->allreduce(send, out.data(), kCount, type, options), out, name_of(options.op));
        }
        ReduceScatterOptions rs;
        rs.op = static_cast<ReduceOp>(o);
        std::vector<uint8_t> out = in_place ? in : std::vector<uint8_t>(bytes, 0xff);
        const void* send = in_place ? out.data() : in.data();
        check(comm_->reduce_scatter(send, out.data(), kCount, type, rs), out, "reduce_scatter");
      }
      std::vector<uint8_t> out = in_place ? in : std::vector<uint8_t>(bytes, 0xff);
      check(comm_->allgather(in_place ? out.data() : in.data(), out.data(), kCount, type), out,
            "allgather");
      out = in_place ? in : std::vector<uint8_t>(bytes, 0xff);
      check(comm_->broadcast(in_place ? out.data() : in.data(), out.data(), kCount, type), out,
            "broadcast");
    }
  }
  EXPECT_TRUE(comm_->barrier().ok());
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
}

TEST_F(OneRank, AverageOfOneRankIsTheInput) {
  std::vector<int32_t> ints = {7, -7, 1, 0, 2147483647};
  std::vector<int32_t> out(ints.size());
  AllreduceOptions options;
  options.op = ReduceOp::kAvg;
  ASSERT_TRUE(comm_->allreduce(ints.data(), out.data(), ints.size(), DataType::kInt32, options).ok());
  EXPECT_EQ(out, ints);
  std::vector<double> d = {0.1, -3.5, 1e300};
  std::vector<double> dout(d.size());
  ASSERT_TRUE(comm_->allreduce(d.data(), dout.data(), d.size(), DataType::kFloat64, options).ok());
  EXPECT_EQ(dout, d);
}

}  // namespace
}  // namespace weft
