// The call check on real communicators, one thread per rank: ranks that disagree on a
// call (collective, count, type, op, root, order, algorithm) all fail with the same message
// naming both sides, within the deadline; ranks that agree are not disturbed.
// (tests/unit/call_check_test.cc checks the agreement's merge and wire format on their own.)
#include <functional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/scoped_env.hpp"
#include "tests/unit/stopwatch.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {

using ::testing::HasSubstr;
using weft::testing::LoopbackEnv;
using weft::testing::ScopedEnv;

const auto* const kLoopbackEnv = ::testing::AddGlobalTestEnvironment(new LoopbackEnv);


constexpr size_t kCount = 1000;

using weft::testing::Comms;
using weft::testing::make_comms;

// One rank's calls: after a matching allreduce, the call under test, which `odd_rank` makes
// differently.
using Call = std::function<absl::Status(Communicator&, bool odd, std::vector<float>& buf)>;

struct Mismatch {
  const char* name;
  Call call;
  const char* expect;  // in the message
};

// Transport, mismatch, rank count: at 3 ranks the odd rank (2) is an "extra" of the
// recursive-doubling rounds, which hands its state over and hears the verdict back; at 6 it
// is rank 5, the extra of rank 1, while ranks 0 and 1 each have one; at 2 it is rank 1.
class CallCheckTest
    : public ::testing::TestWithParam<std::tuple<const char*, Mismatch, int>> {};

TEST_P(CallCheckTest, EveryRankFailsWithTheSameMessage) {
  const char* transport = std::get<0>(GetParam());
  const Mismatch& mismatch = std::get<1>(GetParam());
  const int ranks = std::get<2>(GetParam());
  ScopedEnv env("WEFT_TRANSPORT", transport);
  Comms comms = make_comms(ranks);
  ASSERT_EQ(comms.size(), static_cast<size_t>(ranks));
  const int odd_rank = ranks == 6 ? 5 : ranks == 2 ? 1 : 2;
  std::vector<absl::Status> first(ranks), second(ranks);
  std::vector<absl::Duration> took(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> buf(kCount * ranks, 1.0f);
      first[r] = comms[r]->allreduce(buf.data(), buf.data(), kCount, DataType::kFloat32);
      const weft::testing::Stopwatch start;
      second[r] = mismatch.call(*comms[r], r == odd_rank, buf);
      took[r] = start.elapsed();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(first[r].ok()) << "rank " << r << ": " << first[r];
    EXPECT_EQ(second[r].code(), absl::StatusCode::kInvalidArgument)
        << "rank " << r << ": " << second[r];
    SCOPED_TRACE(std::string(second[r].message()));
    EXPECT_THAT(second[r].message(), HasSubstr("ranks disagree on the collective call"));
    EXPECT_THAT(second[r].message(), HasSubstr(mismatch.expect));
    EXPECT_THAT(second[r].message(), HasSubstr(absl::StrCat("rank ", odd_rank, " made")));
    // The same words on every rank, after the "rank N: " prefix that says who reports it.
    EXPECT_EQ(second[r].message().substr(second[r].message().find(':')),
              second[0].message().substr(second[0].message().find(':')));
    EXPECT_LT(took[r], absl::Seconds(10)) << "WEFT_TIMEOUT is 10 s in these tests";
  }
}

// The direct exchange by name: over tcp it runs only so.
AllgatherOptions direct() {
  AllgatherOptions o;
  o.algorithm = "direct";
  return o;
}

const Mismatch kMismatches[] = {
    {"count",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       return c.allreduce(b.data(), b.data(), odd ? kCount - 1 : kCount, DataType::kFloat32);
     },
     "of 999 float"},
    {"type",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       return c.allreduce(b.data(), b.data(), kCount, odd ? DataType::kInt32 : DataType::kFloat32);
     },
     "of 1000 int32"},
    {"op",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       AllreduceOptions o;
       o.op = odd ? ReduceOp::kMax : ReduceOp::kSum;
       return c.allreduce(b.data(), b.data(), kCount, DataType::kFloat32, o);
     },
     "float, max"},
    {"root",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       BroadcastOptions o;
       o.root = odd ? 1 : 0;
       return c.broadcast(b.data(), b.data(), kCount, DataType::kFloat32, o);
     },
     "from root 1"},
    {"broadcast_algorithm",  // the odd rank's count takes the chain, the others' recursive doubling
     [](Communicator& c, bool odd, std::vector<float>& b) {
       static thread_local std::vector<float> large(100 * kCount, 1.0f);
       if (odd) return c.broadcast(large.data(), large.data(), large.size(), DataType::kFloat32);
       return c.broadcast(b.data(), b.data(), kCount, DataType::kFloat32);
     },
     "of 100000 float"},
    {"broadcast_tiny_root",  // small enough to ride with the check's state
     [](Communicator& c, bool odd, std::vector<float>& b) {
       BroadcastOptions o;
       o.root = odd ? 2 : 0;
       return c.broadcast(b.data(), b.data(), 8, DataType::kFloat32, o);
     },
     "from root 2"},
    // Large enough to be offered (the peer reads it from our memory): at 3 ranks the odd rank
    // is an extra that thinks it is the root, and its partner never reads the offer.
    {"broadcast_offered_root",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       static thread_local std::vector<float> large(64 * 1024, 1.0f);
       BroadcastOptions o;
       o.root = odd ? 2 : 0;
       o.algorithm = "recursive_doubling";
       return c.broadcast(large.data(), large.data(), large.size(), DataType::kFloat32, o);
     },
     "from root 2"},
    // More than the shm ring or a socket buffer holds: at 3 ranks the odd rank is an extra
    // whose partner never reads the vector it hands over.
    {"allreduce_large_op",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       static thread_local std::vector<float> large(1 << 20, 1.0f);
       AllreduceOptions o;
       o.op = odd ? ReduceOp::kMax : ReduceOp::kSum;
       o.algorithm = "recursive_doubling";
       return c.allreduce(large.data(), large.data(), large.size(), DataType::kFloat32, o);
     },
     "float, max"},
    // Small vectors ride with the state, and a partner reads its expected length with the
    // head: here it gets more or fewer bytes than it asked for.
    {"carried_count",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       return c.allreduce(b.data(), b.data(), odd ? 40 : 8, DataType::kFloat32);
     },
     "of 40 float"},
    {"carried_against_sent",  // the odd rank's vector follows its state in writes of its own
     [](Communicator& c, bool odd, std::vector<float>& b) {
       return c.allreduce(b.data(), b.data(), odd ? kCount : 8, DataType::kFloat32);
     },
     "of 1000 float"},
    // A block too large to ride in the state's write is still read with the state, straight
    // into the output (AgreementRound::kReadWithStateUpTo): here more or fewer bytes follow
    // the partner's state than were asked for.
    {"read_with_state_count",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       static thread_local std::vector<float> out(6 * kCount);
       return c.allgather(b.data(), out.data(), odd ? 300 : kCount, DataType::kFloat32);
     },
     "allgather of 300 float"},
    {"reduce_scatter_count",  // recursive halving at 4 ranks, doubling at 3; carried
     [](Communicator& c, bool odd, std::vector<float>& b) {
       static thread_local std::vector<float> out(16);
       return c.reduce_scatter(b.data(), out.data(), odd ? 9 : 8, DataType::kFloat32);
     },
     "reduce_scatter of 9 float"},
    {"collective",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       if (odd) return c.allgather(b.data(), b.data(), kCount, DataType::kFloat32);
       return c.allreduce(b.data(), b.data(), kCount, DataType::kFloat32);
     },
     "allgather of 1000 float"},
    {"order",  // the odd rank slips in a barrier before the allreduce the others make
     [](Communicator& c, bool odd, std::vector<float>& b) {
       if (odd) {
         if (absl::Status s = c.barrier(); !s.ok()) return s;
       }
       return c.allreduce(b.data(), b.data(), kCount, DataType::kFloat32);
     },
     "made call #1: barrier"},
    // The direct exchange, forced by name, sends its state to every peer and waits for one
    // from each: here against ranks that run the rounds (a larger count, another
    // collective), as the odd rank and as the others, and against itself. Over shm small
    // calls take it anyway; over tcp only by name.
    {"direct_count",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       static thread_local std::vector<float> out(16 * 9);
       return c.allgather(b.data(), out.data(), odd ? 9 : 8, DataType::kFloat32, direct());
     },
     "allgather of 9 float"},
    {"direct_against_rounds",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       if (odd) return c.allgather(b.data(), b.data() + kCount, 200, DataType::kFloat32);
       return c.allgather(b.data(), b.data() + kCount, 8, DataType::kFloat32, direct());
     },
     "allgather of 200 float"},
    {"rounds_against_direct",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       if (odd) return c.allgather(b.data(), b.data() + kCount, 8, DataType::kFloat32, direct());
       return c.allgather(b.data(), b.data() + kCount, 200, DataType::kFloat32);
     },
     "allgather of 8 float"},
    {"direct_against_ring",  // the ring runs the rounds on their own first
     [](Communicator& c, bool odd, std::vector<float>& b) {
       constexpr size_t kRing = 5000;  // 3-6 x 20 KB: past the small-message size
       static thread_local std::vector<float> in(kRing, 1.0f), out(6 * kRing);
       if (odd) return c.allgather(in.data(), out.data(), 4, DataType::kFloat32, direct());
       return c.allgather(in.data(), out.data(), kRing, DataType::kFloat32);
     },
     "allgather of 4 float"},
    {"direct_allreduce_against_rounds",  // "carried_against_sent" the other way round
     [](Communicator& c, bool odd, std::vector<float>& b) {
       AllreduceOptions o;
       o.algorithm = direct().algorithm;
       if (odd) return c.allreduce(b.data(), b.data(), 8, DataType::kFloat32, o);
       return c.allreduce(b.data(), b.data(), kCount, DataType::kFloat32);
     },
     "allreduce of 8 float"},
    {"direct_against_allreduce",
     [](Communicator& c, bool odd, std::vector<float>& b) {
       if (odd) return c.allgather(b.data(), b.data() + kCount, 8, DataType::kFloat32, direct());
       return c.allreduce(b.data(), b.data(), 8, DataType::kFloat32);
     },
     "allgather of 8 float"},
    {"zero_count",  // a rank with nothing to send still takes part in the check
     [](Communicator& c, bool odd, std::vector<float>& b) {
       return c.allreduce(b.data(), b.data(), odd ? 0 : kCount, DataType::kFloat32);
     },
     "of 0 float"},
};

// "tcp_count_np3": transport, mismatch, rank count.
std::string case_name(
    const ::testing::TestParamInfo<std::tuple<const char*, Mismatch, int>>& info) {
  return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name + "_np" +
         std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Mismatches, CallCheckTest,
    ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::ValuesIn(kMismatches),
                       ::testing::Values(3, 4, 6)),
    case_name);

// Two ranks: one round, over the one link, and every message of it ahead of the data. The
// odd rank (1) against the same ring call made otherwise, against an algorithm that carries
// the check in band or another that runs the rounds first, and with no data at all.
constexpr size_t kRingCount = 40000;  // 160 KB a rank: past the small-message size

// A rank's input, and room for the output of any call below.
std::vector<float>& ring_in() {
  static thread_local std::vector<float> v(kRingCount, 1.0f);
  return v;
}
std::vector<float>& ring_out() {
  static thread_local std::vector<float> v(2 * kRingCount, 1.0f);
  return v;
}

const Mismatch kTwoRankMismatches[] = {
    {"ring_allgather_count",
     [](Communicator& c, bool odd, std::vector<float>&) {
       return c.allgather(ring_in().data(), ring_out().data(), odd ? kRingCount - 1 : kRingCount,
                          DataType::kFloat32);
     },
     "allgather of 39999 float"},
    {"ring_allgather_against_carried",  // the odd rank's block rides with its state
     [](Communicator& c, bool odd, std::vector<float>&) {
       return c.allgather(ring_in().data(), ring_out().data(), odd ? 8 : kRingCount,
                          DataType::kFloat32);
     },
     "allgather of 8 float"},
    {"ring_allreduce_op",
     [](Communicator& c, bool odd, std::vector<float>&) {
       AllreduceOptions o;
       o.op = odd ? ReduceOp::kMax : ReduceOp::kSum;
       o.algorithm = "ring";
       return c.allreduce(ring_out().data(), ring_out().data(), 2 * kRingCount,
                          DataType::kFloat32, o);
     },
     "float, max"},
    {"ring_against_exchange",  // the same rounds first, another algorithm after them
     [](Communicator& c, bool odd, std::vector<float>&) {
       AllreduceOptions o;
       o.algorithm = odd ? "exchange" : "ring";
       return c.allreduce(ring_out().data(), ring_out().data(), 2 * kRingCount,
                          DataType::kFloat32, o);
     },
     "(exchange)"},
    {"ring_reduce_scatter_count",
     [](Communicator& c, bool odd, std::vector<float>&) {
       return c.reduce_scatter(ring_out().data(), ring_in().data(),
                               odd ? kRingCount - 1 : kRingCount, DataType::kFloat32);
     },
     "reduce_scatter of 39999 float"},
    {"ring_collective",
     [](Communicator& c, bool odd, std::vector<float>&) {
       float* in = ring_in().data();
       float* out = ring_out().data();
       if (odd) return c.allgather(in, out, kRingCount, DataType::kFloat32);
       return c.reduce_scatter(out, in, kRingCount, DataType::kFloat32);
     },
     "allgather of 40000 float"},
    {"ring_order",  // the odd rank slips in a barrier before the allgather the other makes
     [](Communicator& c, bool odd, std::vector<float>&) {
       if (odd) {
         if (absl::Status s = c.barrier(); !s.ok()) return s;
       }
       return c.allgather(ring_in().data(), ring_out().data(), kRingCount, DataType::kFloat32);
     },
     "made call #1: barrier"},
    {"ring_zero_count",  // no data to move: the rounds on their own, then nothing
     [](Communicator& c, bool odd, std::vector<float>&) {
       return c.allgather(ring_in().data(), ring_out().data(), odd ? 0 : kRingCount,
                          DataType::kFloat32);
     },
     "allgather of 0 float"},
};

INSTANTIATE_TEST_SUITE_P(
    TwoRankMismatches, CallCheckTest,
    ::testing::Combine(::testing::Values("shm", "tcp", "ucx"),
                       ::testing::ValuesIn(kTwoRankMismatches), ::testing::Values(2)),
    case_name);

// Matching calls that differ only in what a collective ignores are not a mismatch.
TEST(CallCheck, IgnoredArgumentsDoNotCount) {
  Comms comms = make_comms(3);
  ASSERT_EQ(comms.size(), 3u);
  std::vector<absl::Status> st(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> buf(30, 1.0f);
      AllgatherOptions ag;  // no op to differ in
      st[r] = comms[r]->allgather(buf.data() + 10 * r, buf.data(), 10, DataType::kFloat32, ag);
      if (st[r].ok()) st[r] = comms[r]->barrier();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
}

}  // namespace
}  // namespace weft
