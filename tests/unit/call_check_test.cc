// The call check: ranks that disagree on a call (collective, count, type, op, root, order)
// all fail with the same message naming both sides, within the deadline; ranks that agree
// are not disturbed. The agreement's merge and wire format are checked on their own first.
#include "collectives/call_check.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "collectives/algorithm.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/scoped_env.hpp"
#include "weft/weft.hpp"
#include "tests/unit/stopwatch.hpp"

namespace weft {
namespace {

using ::testing::HasSubstr;
using weft::testing::LoopbackEnv;
using weft::testing::ScopedEnv;

const auto* const kLoopbackEnv = ::testing::AddGlobalTestEnvironment(new LoopbackEnv);

CallSignature signature(uint32_t sequence, CollectiveKind kind, size_t count,
                        DataType type = DataType::kFloat32, ReduceOp op = ReduceOp::kSum,
                        int root = 0) {
  CollectiveArgs args;
  args.kind = kind, args.count = count, args.type = type, args.op = op, args.root = root;
  uint8_t algorithm = 0;
  while (all_algorithms()[algorithm].kind != kind) ++algorithm;
  return CallSignature::of(sequence, args, algorithm);
}

CallAgreement own(uint32_t rank, const CallSignature& s) {
  CallAgreement a;
  a.reference_rank = rank;
  a.reference = s;
  return a;
}

// Whatever order and grouping the merges take, every rank ends with the same agreement: the
// lowest rank's signature and the lowest rank that differs from it.
TEST(CallAgreement, MergeIsOrderFreeAndFindsTheLowestDifferingRank) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    std::vector<CallSignature> sigs;
    for (int r = 0; r < n; ++r) {
      sigs.push_back(signature(7, CollectiveKind::kAllreduce, rng() % 4 == 0 ? 2 : 1));
    }
    int expected = -1;
    for (int r = 1; r < n && expected < 0; ++r) {
      if (!(sigs[r] == sigs[0])) expected = r;
    }
    // Random merge tree: repeatedly merge two random groups.
    std::vector<CallAgreement> groups;
    for (int r = 0; r < n; ++r) groups.push_back(own(r, sigs[r]));
    while (groups.size() > 1) {
      const size_t i = rng() % groups.size();
      size_t j = rng() % groups.size();
      if (i == j) continue;
      groups[i].merge(groups[j]);
      if (rng() % 3 == 0) groups[i].merge(groups[j]);  // hearing twice changes nothing
      groups.erase(groups.begin() + static_cast<long>(j));
    }
    const CallAgreement& all = groups[0];
    EXPECT_EQ(all.reference_rank, 0u);
    if (expected < 0) {
      EXPECT_EQ(all.differing_rank, CallAgreement::kNoRank) << "trial " << trial;
      EXPECT_TRUE(all.verdict().ok());
    } else {
      EXPECT_EQ(all.differing_rank, static_cast<uint32_t>(expected)) << "trial " << trial;
      EXPECT_TRUE(all.differing == sigs[expected]);
    }
  }
}

TEST(CallAgreement, VerdictNamesBothSides) {
  CallAgreement a = own(0, signature(3, CollectiveKind::kAllreduce, 1024));
  a.merge(own(2, signature(3, CollectiveKind::kAllgather, 1024)));
  const absl::Status v = a.verdict();
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.message(), HasSubstr("rank 0 made call #3: allreduce of 1024 float, sum (ring)"));
  EXPECT_THAT(v.message(), HasSubstr("rank 2 made call #3: allgather of 1024 float (ring)"));
}

TEST(CallAgreement, WireRoundTripsAndRejectsWhatIsNotACallCheck) {
  CallAgreement a = own(1, signature(9, CollectiveKind::kBroadcast, 77, DataType::kInt8,
                                     ReduceOp::kMax, 3));
  a.merge(own(4, signature(9, CollectiveKind::kBroadcast, 77, DataType::kInt8, ReduceOp::kSum, 2)));
  std::byte wire[CallAgreement::kHeadBytes + CallAgreement::kDifferingBytes];
  ASSERT_EQ(a.encode(wire), sizeof wire) << "a differing rank takes the long form";
  auto back = CallAgreement::decode(wire, sizeof wire, 5);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->reference_rank, 1u);
  EXPECT_TRUE(back->reference == a.reference);
  EXPECT_EQ(back->differing_rank, 4u);
  EXPECT_TRUE(back->differing == a.differing);
  EXPECT_EQ(back->reference.op, ReduceOp::kSum) << "broadcast ignores the op";

  const CallAgreement agreeing = own(0, signature(1, CallSignature{}.kind, 5));
  std::byte short_wire[CallAgreement::kWireBytes];
  ASSERT_EQ(agreeing.encode(short_wire), CallAgreement::kHeadBytes);
  EXPECT_EQ(CallAgreement::wire_bytes(short_wire), CallAgreement::kHeadBytes);
  auto agreed = CallAgreement::decode(short_wire, CallAgreement::kHeadBytes, 1);
  ASSERT_TRUE(agreed.ok()) << agreed.status();
  EXPECT_EQ(agreed->differing_rank, CallAgreement::kNoRank);
  EXPECT_TRUE(agreed->reference == agreeing.reference);

  EXPECT_FALSE(CallAgreement::decode(wire, sizeof wire - 1, 5).ok());
  EXPECT_FALSE(CallAgreement::decode(wire, sizeof wire, 4).ok()) << "rank 4 of 4 ranks";
  // Every single-byte corruption is either refused or still a well-formed agreement.
  for (size_t i = 0; i < sizeof wire; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::byte bad[sizeof wire];
      std::copy(wire, wire + sizeof wire, bad);
      bad[i] ^= std::byte(1 << bit);
      auto d = CallAgreement::decode(bad, sizeof bad, 5);
      if (i == 1 && bit == 1) {  // the direct flag: a state of either kind
        ASSERT_TRUE(d.ok()) << d.status();
        EXPECT_TRUE(d->direct);
      } else if (i < 2) {
        EXPECT_FALSE(d.ok()) << "magic/version byte " << i << " bit " << bit;
      }
      if (d.ok()) {
        EXPECT_LT(d->reference_rank, 5u);
        EXPECT_LT(static_cast<int>(d->reference.kind), kNumCollectiveKinds);
      }
    }
  }
}

// Whether a direct rank took part travels and survives every merge: each rank that ran the
// rounds must learn it, or the direct ranks would wait for its state in vain.
TEST(CallAgreement, TheDirectFlagTravelsAndSticksThroughMerges) {
  CallAgreement direct = own(3, signature(4, CollectiveKind::kAllgather, 8));
  direct.direct = true;
  std::byte wire[CallAgreement::kWireBytes];
  ASSERT_EQ(direct.encode(wire), CallAgreement::kHeadBytes);
  auto heard = CallAgreement::decode(wire, CallAgreement::kHeadBytes, 4);
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_TRUE(heard->direct);
  EXPECT_FALSE(own(0, direct.reference).direct);

  CallAgreement rounds = own(0, signature(4, CollectiveKind::kAllgather, 1000));
  CallAgreement other = rounds;
  rounds.merge(*heard);  // the lower reference wins, the flag stays
  EXPECT_TRUE(rounds.direct);
  EXPECT_EQ(rounds.reference_rank, 0u);
  EXPECT_EQ(rounds.differing_rank, 3u);
  other.merge(own(1, other.reference));
  EXPECT_FALSE(other.direct);
  other.merge(rounds);
  EXPECT_TRUE(other.direct);
  const size_t len = other.encode(wire);
  ASSERT_EQ(len, CallAgreement::kHeadBytes + CallAgreement::kDifferingBytes);
  auto long_form = CallAgreement::decode(wire, len, 4);
  ASSERT_TRUE(long_form.ok()) << long_form.status();
  EXPECT_TRUE(long_form->direct);
}

// A route change rides the check: it travels, the merge keeps the least one proposed (an
// isolation before a restore), whatever the order, and a malformed one is refused.
TEST(CallAgreement, TheLeastRouteChangeTravelsAndWinsEveryMerge) {
  const RouteChange isolate_12{RouteChange::kIsolateLink, 1, 2};
  const RouteChange isolate_23{RouteChange::kIsolateLink, 2, 3};
  const RouteChange restore_01{RouteChange::kRestoreLink, 0, 1};
  const RouteChange rail_of_3{RouteChange::kIsolateRail, 3, 1};
  CallAgreement a = own(2, signature(7, CollectiveKind::kAllreduce, 100));
  a.route = isolate_23;
  std::byte wire[CallAgreement::kWireBytes];
  const size_t len = a.encode(wire);
  ASSERT_EQ(len, CallAgreement::kHeadBytes + CallAgreement::kRouteBytes);
  EXPECT_EQ(CallAgreement::wire_bytes(wire), len);
  auto back = CallAgreement::decode(wire, len, 4);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->route.has_value());
  EXPECT_EQ(*back->route, isolate_23);
  EXPECT_EQ(back->differing_rank, CallAgreement::kNoRank) << "a route change is no mismatch";
  EXPECT_TRUE(back->verdict().ok());

  for (int order = 0; order < 6; ++order) {
    std::vector<CallAgreement> states;
    for (const auto& r : {std::optional<RouteChange>(restore_01), std::optional<RouteChange>(),
                          std::optional<RouteChange>(isolate_12), std::optional<RouteChange>(rail_of_3)}) {
      states.push_back(own(static_cast<uint32_t>(states.size()), a.reference));
      states.back().route = r;
    }
    std::vector<int> idx = {0, 1, 2, 3};
    for (int k = 0; k < order * 4; ++k) std::next_permutation(idx.begin(), idx.end());
    CallAgreement merged = states[idx[0]];
    for (int i : {1, 2, 3, 1}) merged.merge(states[idx[i]]);  // the last: idempotent
    ASSERT_TRUE(merged.route.has_value());
    EXPECT_EQ(*merged.route, isolate_12) << "order " << order;
    EXPECT_EQ(merged.reference_rank, 0u);
  }

  // With a mismatch too: both parts travel.
  CallAgreement both = a;
  both.merge(own(3, signature(7, CollectiveKind::kAllgather, 100)));
  const size_t long_len = both.encode(wire);
  ASSERT_EQ(long_len, CallAgreement::kWireBytes);
  auto long_back = CallAgreement::decode(wire, long_len, 4);
  ASSERT_TRUE(long_back.ok()) << long_back.status();
  EXPECT_EQ(long_back->differing_rank, 3u);
  EXPECT_EQ(*long_back->route, isolate_23);

  // Out of range: a rank beyond the communicator, low >= high, an unknown action.
  for (RouteChange bad : {RouteChange{RouteChange::kIsolateLink, 2, 4},
                          RouteChange{RouteChange::kIsolateLink, 2, 2},
                          RouteChange{RouteChange::kRestoreLink, 3, 1},
                          RouteChange{RouteChange::kIsolateRail, 4, 0},
                          RouteChange{RouteChange::kRestoreRail, 1, RouteChange::kMaxRails},
                          RouteChange{static_cast<RouteChange::Action>(5), 0, 1}}) {
    CallAgreement c = own(0, a.reference);
    c.route = bad;
    const size_t n = c.encode(wire);
    EXPECT_FALSE(CallAgreement::decode(wire, n, 4).ok()) << bad.describe();
  }
}

TEST(CallAgreement, SequenceNumbersComeBackWholeFromTheirLowBits) {
  // Only the low 16 bits travel; the receiver's own sequence number restores the rest, on
  // either side of a 65536 boundary.
  for (uint32_t sequence : {0u, 9u, 65535u, 65536u, 65540u, 200000u}) {
    const CallAgreement sent = own(0, signature(sequence, CollectiveKind::kAllreduce, 5));
    std::byte wire[CallAgreement::kWireBytes];
    ASSERT_EQ(sent.encode(wire), CallAgreement::kHeadBytes);
    for (int64_t ours : {int64_t{sequence} - 1, int64_t{sequence}, int64_t{sequence} + 1}) {
      if (ours < 0) continue;
      auto heard = CallAgreement::decode(wire, CallAgreement::kHeadBytes, 1,
                                         static_cast<uint32_t>(ours));
      ASSERT_TRUE(heard.ok()) << heard.status();
      EXPECT_EQ(heard->reference.sequence, sequence) << "heard by a rank at call #" << ours;
    }
  }
}

// ---- real communicators, one thread per rank ----

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
    EXPECT_EQ(second[r].code(), absl::StatusCode::kInvalidArgument) << "rank " << r << ": " << second[r];
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

INSTANTIATE_TEST_SUITE_P(
    Mismatches, CallCheckTest,
    ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::ValuesIn(kMismatches),
                       ::testing::Values(3, 4, 6)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name + "_np" +
             std::to_string(std::get<2>(info.param));
    });

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
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name + "_np" +
             std::to_string(std::get<2>(info.param));
    });

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
