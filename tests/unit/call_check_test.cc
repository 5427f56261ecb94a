// The call check's agreement on its own: its merge, its verdict and its wire format
// (tests/unit/call_mismatch_test.cc gives real communicators calls that differ).
#include "collectives/call_check.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "collectives/algorithm.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

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
                          std::optional<RouteChange>(isolate_12),
                          std::optional<RouteChange>(rail_of_3)}) {
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

}  // namespace
}  // namespace weft
