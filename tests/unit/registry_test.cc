// The algorithm registry (collectives/registry.cc): every algorithm is listed once under its
// collective with a description, the first of each collective is its default, the automatic
// choice follows the sizes and links documented there, and a name that cannot run is refused
// with a message that says why.
#include <set>
#include <string>
#include <utility>

#include "collectives/algorithm.hpp"
#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr size_t kSmall = 64 << 10;  // WEFT_SMALL_MESSAGE_BYTES's default
constexpr size_t kMiB = size_t{1} << 20;

// The name the automatic choice gives, or the error's message.
std::string chosen(CollectiveKind kind, size_t bytes, int nranks, bool shm_only) {
  auto a = choose_algorithm(kind, "", bytes, nranks, kSmall, shm_only);
  return a.ok() ? (*a)->name : std::string(a.status().message());
}

TEST(Registry, EveryAlgorithmIsListedOnceWithADescription) {
  std::set<std::pair<CollectiveKind, std::string>> seen;
  for (const Algorithm& a : all_algorithms()) {
    EXPECT_TRUE(seen.insert({a.kind, a.name}).second) << a.name << " listed twice";
    EXPECT_NE(std::string(a.description), "") << a.name;
    EXPECT_NE(a.run, nullptr) << a.name;
    EXPECT_EQ(find_algorithm(a.kind, a.name), &a);
  }
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    EXPECT_NE(chosen(kind, 16 * kMiB, 3, false), "") << name_of(kind) << " has no default";
  }
}

TEST(Registry, AllreduceChoiceFollowsSizeRanksAndLinks) {
  constexpr auto kAr = CollectiveKind::kAllreduce;
  EXPECT_EQ(chosen(kAr, 8, 2, true), "recursive_doubling");
  EXPECT_EQ(chosen(kAr, kSmall, 4, false), "recursive_doubling");
  // What rides with the call check's state, on 3 to 16 ranks over shm: the direct exchange.
  EXPECT_EQ(chosen(kAr, 488, 4, true), "direct");
  EXPECT_EQ(chosen(kAr, 8, 16, true), "direct");
  EXPECT_EQ(chosen(kAr, 8, 3, true), "direct");
  EXPECT_EQ(chosen(kAr, 8, 6, true), "direct");
  EXPECT_EQ(chosen(kAr, 8, 4, false), "recursive_doubling");
  EXPECT_EQ(chosen(kAr, 489, 4, true), "recursive_doubling");
  EXPECT_EQ(chosen(kAr, 8, 32, true), "recursive_doubling");
  EXPECT_EQ(chosen(kAr, 8, 6, false), "recursive_doubling");
  // Two ranks over shm, above the small size: the push.
  EXPECT_EQ(chosen(kAr, kSmall + 1, 2, true), "push");
  EXPECT_EQ(chosen(kAr, 256 * kMiB, 2, true), "push");
  // Not over shm everywhere, or not two ranks: the ring.
  EXPECT_EQ(chosen(kAr, 256 << 10, 2, false), "ring");
  EXPECT_EQ(chosen(kAr, 256 << 10, 3, true), "ring");
  EXPECT_EQ(chosen(kAr, 256 << 10, 4, true), "ring");
}

TEST(Registry, OtherCollectivesChooseBySize) {
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 4096, 4, true), "recursive_doubling");
  // Blocks that ride with the call check's state, on 3 to 16 ranks over shm: the direct
  // exchange.
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 4 * 488, 4, true), "direct");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 4 * 488, 4, false), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 4 * 489, 4, true), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 16 * 64, 16, true), "direct");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 32 * 64, 32, true), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 64, 2, true), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 64, 6, true), "direct");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 3 * 488, 3, true), "direct");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 64, 6, false), "ring");
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, 4096, 3, true), "ring");  // doubling needs 2^k
  EXPECT_EQ(chosen(CollectiveKind::kAllgather, kMiB, 4, true), "ring");
  // reduce_scatter's bytes are one rank's block: recursive doubling moves all N of them.
  EXPECT_EQ(chosen(CollectiveKind::kReduceScatter, kSmall / 4, 4, true), "recursive_halving");
  EXPECT_EQ(chosen(CollectiveKind::kReduceScatter, 8, 2, true), "recursive_halving");
  EXPECT_EQ(chosen(CollectiveKind::kReduceScatter, kSmall / 3, 3, true), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kReduceScatter, kSmall / 4 + 1, 4, true), "ring");
  EXPECT_EQ(chosen(CollectiveKind::kBroadcast, 8, 2, true), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kBroadcast, kSmall, 5, false), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kBroadcast, kSmall + 1, 2, true), "chain");
  EXPECT_EQ(chosen(CollectiveKind::kBarrier, 0, 5, false), "recursive_doubling");
}

TEST(Registry, ANameWinsAndOneThatCannotRunIsRefusedWithTheReason) {
  auto ring = choose_algorithm(CollectiveKind::kAllreduce, "ring", 8, 2, kSmall, true);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_STREQ((*ring)->name, "ring");

  auto exchange = choose_algorithm(CollectiveKind::kAllreduce, "exchange", 8 * kMiB, 3, kSmall, false);
  EXPECT_EQ(exchange.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(exchange.status().message().find("two ranks, not 3"), std::string::npos)
      << exchange.status();

  auto rd = choose_algorithm(CollectiveKind::kAllgather, "recursive_doubling", 8, 6, kSmall, true);
  EXPECT_EQ(rd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rd.status().message().find("power-of-two"), std::string::npos) << rd.status();

  auto direct = choose_algorithm(CollectiveKind::kAllgather, "direct", 8, 32, kSmall, true);
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(direct.status().message().find("at most 16 ranks, not 32"), std::string::npos)
      << direct.status();

  auto unknown = choose_algorithm(CollectiveKind::kAllreduce, "tree", 8, 2, kSmall, true);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* known : {"ring", "recursive_doubling", "exchange", "push", "direct"}) {
    EXPECT_NE(unknown.status().message().find(known), std::string::npos) << unknown.status();
  }
}

}  // namespace
}  // namespace weft
