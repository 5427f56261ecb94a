// Shrink: the ranks still alive agree on who they are and carry on in a new communicator
// with exact results. Ranks are threads here (tests/unit/fault_test.cc kills real
// processes); a lost rank is one whose communicator was destroyed (its control listener
// refuses at once) or one that never calls shrink (only the timeout finds it).
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/shrink_wire.hpp"
#include "tests/unit/scoped_env.hpp"
#include "weft/weft.hpp"
#include "tests/unit/stopwatch.hpp"

namespace weft {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using weft::testing::Comms;
using weft::testing::LoopbackEnv;
using weft::testing::make_comms;
using weft::testing::ScopedEnv;

const auto* const kLoopbackEnv = ::testing::AddGlobalTestEnvironment(new LoopbackEnv);

struct Shrunk {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = absl::UnknownError("not run");
  std::vector<int> dropped;
  absl::Duration took;
};

// Every rank in `callers` shrinks at once, with `timeout`.
std::vector<Shrunk> shrink_all(Comms& comms, const std::vector<int>& callers,
                               absl::Duration timeout) {
  std::vector<Shrunk> out(comms.size());
  std::vector<std::thread> threads;
  for (int r : callers) {
    threads.emplace_back([&, r] {
      ShrinkOptions options;
      options.timeout = timeout;
      const weft::testing::Stopwatch start;
      out[r].comm = comms[r]->shrink(&out[r].dropped, options);
      out[r].took = start.elapsed();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// An allreduce over the new communicators, checked exactly: rank r adds r + 1 + i % 7.
void expect_exact_allreduce(const std::vector<Communicator*>& comms, size_t count) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<int32_t>> recv(n, std::vector<int32_t>(count, -1));
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int32_t> send(count);
      for (size_t i = 0; i < count; ++i) send[i] = r + 1 + static_cast<int32_t>(i % 7);
      status[r] = comms[r]->allreduce(send.data(), recv[r].data(), count, DataType::kInt32);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(status[r].ok()) << "new rank " << r << ": " << status[r];
    for (size_t i = 0; i < count; ++i) {
      const int32_t want = n * (n + 1) / 2 + n * static_cast<int32_t>(i % 7);
      ASSERT_EQ(recv[r][i], want) << "new rank " << r << ", element " << i;
    }
  }
}

class ShrinkTest : public ::testing::TestWithParam<const char*> {
 protected:
  ScopedEnv transport_{"WEFT_TRANSPORT", GetParam()};
};

TEST_P(ShrinkTest, WithEveryRankAliveNobodyIsDropped) {
  Comms comms = make_comms(4);
  ASSERT_EQ(comms.size(), 4u);
  auto shrunk = shrink_all(comms, {0, 1, 2, 3}, absl::Seconds(10));
  std::vector<Communicator*> next;
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(shrunk[r].comm.ok()) << "rank " << r << ": " << shrunk[r].comm.status();
    EXPECT_EQ((*shrunk[r].comm)->rank(), r);
    EXPECT_EQ((*shrunk[r].comm)->size(), 4);
    EXPECT_TRUE(shrunk[r].dropped.empty());
    next.push_back(shrunk[r].comm->get());
  }
  expect_exact_allreduce(next, 1000);
  // The old communicator refuses further calls.
  int32_t x = 1;
  absl::Status s = comms[0]->allreduce(&x, &x, 1, DataType::kInt32);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("shrank"));
}

// A rank that is gone (its communicator destroyed, as when its process exits) is found at
// once, not at the timeout; the survivors get new ranks in their old order.
TEST_P(ShrinkTest, ARankThatIsGoneIsDroppedAtOnce) {
  for (int lost : {0, 2}) {
    SCOPED_TRACE(absl::StrCat("lost rank ", lost));
    Comms comms = make_comms(4);
    ASSERT_EQ(comms.size(), 4u);
    comms[lost].reset();
    std::vector<int> callers;
    for (int r = 0; r < 4; ++r) {
      if (r != lost) callers.push_back(r);
    }
    auto shrunk = shrink_all(comms, callers, absl::Seconds(20));
    std::vector<Communicator*> next;
    for (int r : callers) {
      ASSERT_TRUE(shrunk[r].comm.ok()) << "rank " << r << ": " << shrunk[r].comm.status();
      EXPECT_EQ((*shrunk[r].comm)->size(), 3);
      EXPECT_EQ((*shrunk[r].comm)->rank(), r < lost ? r : r - 1);
      EXPECT_THAT(shrunk[r].dropped, ElementsAreArray({lost}));
      EXPECT_LT(shrunk[r].took, absl::Seconds(10)) << "found by the timeout, not at once";
      next.push_back(shrunk[r].comm->get());
    }
    expect_exact_allreduce(next, 4099);
  }
}

// A rank that is gone between two small calls: the survivors' direct exchange, which waits
// on every link at once, still finds it at once (not at the timeout) on whichever link it
// is, and they shrink and carry on.
TEST_P(ShrinkTest, TheDirectExchangeFindsAGoneRankAtOnce) {
  Comms comms = make_comms(4);
  ASSERT_EQ(comms.size(), 4u);
  auto run_direct = [&](const std::vector<int>& callers) {
    std::vector<absl::Status> status(comms.size());
    std::vector<absl::Duration> took(comms.size());
    std::vector<std::thread> threads;
    for (int r : callers) {
      threads.emplace_back([&, r] {
        int32_t data[8] = {r, r, r, r, r, r, r, r};
        AllreduceOptions o;
        o.algorithm = "direct";
        const weft::testing::Stopwatch start;
        status[r] = comms[r]->allreduce(data, data, 8, DataType::kInt32, o);
        took[r] = start.elapsed();
      });
    }
    for (auto& t : threads) t.join();
    return std::make_pair(status, took);
  };
  auto [first, first_took] = run_direct({0, 1, 2, 3});  // links every pair
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(first[r].ok()) << "rank " << r << ": " << first[r];
  comms[3].reset();
  auto [second, took] = run_direct({0, 1, 2});
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(second[r].ok()) << "rank " << r;
    EXPECT_LT(took[r], absl::Seconds(5)) << "rank " << r << " found it by the timeout: " << second[r];
  }
  auto shrunk = shrink_all(comms, {0, 1, 2}, absl::Seconds(10));
  std::vector<Communicator*> next;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(shrunk[r].comm.ok()) << "rank " << r << ": " << shrunk[r].comm.status();
    next.push_back(shrunk[r].comm->get());
  }
  expect_exact_allreduce(next, 8);
}

// A rank that never answers (stopped, stuck) is dropped once the probe times out; the lowest
// rank is the leader, so losing rank 0 moves the leadership.
TEST_P(ShrinkTest, ARankThatNeverAnswersIsDroppedAtTheTimeout) {
  Comms comms = make_comms(4);
  ASSERT_EQ(comms.size(), 4u);
  auto shrunk = shrink_all(comms, {1, 2, 3}, absl::Seconds(1));
  std::vector<Communicator*> next;
  for (int r = 1; r < 4; ++r) {
    ASSERT_TRUE(shrunk[r].comm.ok()) << "rank " << r << ": " << shrunk[r].comm.status();
    EXPECT_EQ((*shrunk[r].comm)->rank(), r - 1);
    EXPECT_THAT(shrunk[r].dropped, ElementsAreArray({0}));
    EXPECT_LT(shrunk[r].took, absl::Seconds(2 * 1 + 3)) << "shrink's bound: twice the timeout";
    next.push_back(shrunk[r].comm->get());
  }
  expect_exact_allreduce(next, 17);
}

// Shrinking twice in a row: the new communicator shrinks like the first.
TEST_P(ShrinkTest, AShrunkCommunicatorShrinksAgain) {
  Comms comms = make_comms(3);
  ASSERT_EQ(comms.size(), 3u);
  comms[1].reset();
  auto first = shrink_all(comms, {0, 2}, absl::Seconds(10));
  Comms second_gen;
  for (int r : {0, 2}) {
    ASSERT_TRUE(first[r].comm.ok()) << first[r].comm.status();
    second_gen.push_back(*std::move(first[r].comm));
  }
  second_gen[0].reset();
  auto second = shrink_all(second_gen, {1}, absl::Seconds(10));
  ASSERT_TRUE(second[1].comm.ok()) << second[1].comm.status();
  EXPECT_EQ((*second[1].comm)->size(), 1);
  EXPECT_THAT(second[1].dropped, ElementsAreArray({0}));
  expect_exact_allreduce({second[1].comm->get()}, 5);
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkTest, ::testing::Values("shm", "tcp"));

TEST(ShrinkWire, MessagesRoundTripAndRefuseCorruption) {
  for (int n : {1, 7, 8, 9, 64}) {
    shrink_wire::Report report{n - 1, shrink_wire::RankSet(n, false)};
    for (int r = 0; r < n; r += 3) report.reached[r] = true;
    const std::string wire = shrink_wire::encode_report(report);
    ASSERT_EQ(wire.size(), shrink_wire::report_bytes(n));
    auto back = shrink_wire::decode_report(wire, n);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->from_rank, n - 1);
    EXPECT_EQ(back->reached, report.reached);
    EXPECT_FALSE(shrink_wire::decode_report(wire, n + 1).ok()) << "size mismatch";
    EXPECT_FALSE(shrink_wire::decode_report(wire.substr(1), n).ok()) << "short";
    std::string bad_magic = wire;
    bad_magic[0] = 'X';
    EXPECT_FALSE(shrink_wire::decode_report(bad_magic, n).ok());
    if (n % 8 != 0) {  // a bit past the last rank
      std::string past = wire;
      past.back() = static_cast<char>(past.back() | 0x80);
      EXPECT_FALSE(shrink_wire::decode_report(past, n).ok());
    }
    shrink_wire::Decision decision{0x0123456789abcdefULL, report.reached};
    const std::string dwire = shrink_wire::encode_decision(decision);
    auto dback = shrink_wire::decode_decision(dwire, n);
    ASSERT_TRUE(dback.ok()) << dback.status();
    EXPECT_EQ(dback->new_job_id, decision.new_job_id);
    EXPECT_EQ(dback->survivors, decision.survivors);
    EXPECT_FALSE(shrink_wire::decode_decision(wire.substr(0, 12) + dwire.substr(12), n).ok())
        << "a report's magic on a decision";
  }
  EXPECT_FALSE(shrink_wire::decode_report(shrink_wire::encode_report({5, shrink_wire::RankSet(4)}), 4).ok())
      << "a report from a rank past the communicator";
  auto len = shrink_wire::decode_blob_length(shrink_wire::encode_blob("abc").substr(0, 4));
  ASSERT_TRUE(len.ok());
  EXPECT_EQ(*len, 3u);
  EXPECT_FALSE(shrink_wire::decode_blob_length(std::string("\xff\xff\xff\x7f", 4)).ok());
}

}  // namespace
}  // namespace weft
