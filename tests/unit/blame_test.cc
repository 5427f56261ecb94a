// Whom a rank names after a failed call (src/blame.hpp), for each combination of what its
// liveness queries found and what the other ranks had already concluded.
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "src/blame.hpp"

namespace weft::detail {
namespace {

using transport::tcp::Blame;
using transport::tcp::PeerAnswer;

const absl::Duration kWait = absl::Milliseconds(500);
const absl::Status kLinkLost = absl::UnavailableError("shm link to rank 0 failed");

PeerAnswer answer(int rank, PeerAnswer::Outcome outcome, Blame said = {}) {
  PeerAnswer a;
  a.rank = rank;
  a.outcome = outcome;
  a.blame = said;
  return a;
}

TEST(Blame, ASilentRankStoppedAnswering) {
  const Blamed b = judge(kLinkLost, 1, {answer(0, PeerAnswer::kAlive), answer(2, PeerAnswer::kSilent)}, kWait);
  EXPECT_EQ(b.conclusion.kind, Blame::kStopped);
  EXPECT_EQ(b.conclusion.rank, 2);
  EXPECT_TRUE(absl::StartsWith(b.status.message(), "rank 2 stopped answering (rank 1 saw it: "))
      << b.status.message();
  EXPECT_TRUE(absl::EndsWith(b.status.message(), "; what rank 1 met first: shm link to rank 0 failed"));
  EXPECT_EQ(b.status.code(), absl::StatusCode::kUnavailable);
}

TEST(Blame, ARefusingPortIsGone) {
  const Blamed b = judge(kLinkLost, 1, {answer(0, PeerAnswer::kAlive), answer(2, PeerAnswer::kGone)}, kWait);
  EXPECT_EQ(b.conclusion.kind, Blame::kGone);
  EXPECT_EQ(b.conclusion.rank, 2);
  EXPECT_TRUE(absl::StartsWith(b.status.message(), "rank 2 is gone (rank 1 saw it: the port refuses"))
      << b.status.message();
}

// Ranks that gave up and exited are gone too, after the fault: the silent one is the cause.
TEST(Blame, AStoppedRankIsBlamedBeforeAGoneOne) {
  const Blamed b = judge(kLinkLost, 1, {answer(0, PeerAnswer::kGone), answer(2, PeerAnswer::kSilent),
                                        answer(3, PeerAnswer::kAlive, {Blame::kStopped, 2})},
                         kWait);
  EXPECT_EQ(b.conclusion.kind, Blame::kStopped);
  EXPECT_EQ(b.conclusion.rank, 2);
  EXPECT_TRUE(absl::StartsWith(b.status.message(), "rank 2 stopped answering (rank 1 saw it"))
      << b.status.message();
  EXPECT_TRUE(absl::StrContains(b.status.message(), "rank 3 reports the same")) << b.status.message();
}

// A killed process answers nothing until its exit has closed its port; ranks that asked
// after that saw the port refuse, and this rank takes their word for it.
TEST(Blame, SilenceWhereOthersSawTheSamePortRefuseIsGone) {
  const Blamed b = judge(kLinkLost, 1, {answer(0, PeerAnswer::kAlive, {Blame::kGone, 2}),
                                        answer(2, PeerAnswer::kSilent),
                                        answer(3, PeerAnswer::kAlive, {Blame::kGone, 2})},
                         kWait);
  EXPECT_EQ(b.conclusion.kind, Blame::kGone);
  EXPECT_EQ(b.conclusion.rank, 2);
  EXPECT_TRUE(absl::StartsWith(b.status.message(),
                               "rank 2 is gone (rank 1 heard it from ranks 0 and 3, which saw its "
                               "port refuse connections; rank 1 itself had no answer"))
      << b.status.message();
}

TEST(Blame, EveryoneAnsweringButOthersFoundARankHearsIt) {
  const Blamed b = judge(kLinkLost, 1, {answer(0, PeerAnswer::kAlive, {Blame::kStopped, 2}),
                                        answer(2, PeerAnswer::kAlive)},
                         kWait);
  EXPECT_EQ(b.conclusion.kind, Blame::kStopped);
  EXPECT_EQ(b.conclusion.rank, 2);
  EXPECT_TRUE(absl::StartsWith(b.status.message(), "rank 2 stopped answering (rank 1 heard it from rank 0;"))
      << b.status.message();
}

TEST(Blame, EveryoneAnsweringAndNoneBlamedNamesNoRank) {
  const Blamed b = judge(absl::DeadlineExceededError("allreduce timed out"), 1,
                         {answer(0, PeerAnswer::kAlive), answer(2, PeerAnswer::kAlive)}, kWait);
  EXPECT_EQ(b.conclusion.kind, Blame::kNone);
  EXPECT_TRUE(absl::StartsWith(b.status.message(), "every rank answers")) << b.status.message();
  EXPECT_EQ(b.status.code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace weft::detail
