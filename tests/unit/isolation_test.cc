// What a rank proposes about its own links: a FAILING link is proposed for isolation at
// once, proposed back after its quiet time, and HEALTHY after a probation without FAILING;
// FAILING on probation isolates it again; a link the peer isolated is this rank's to restore
// too; other ranks' links and the states it reports itself are not its business.
#include "src/isolation.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace weft {
namespace {

using health::Change;
using health::ScopeKind;
using health::State;

Change judged(int peer, State from, State to) {
  Change c;
  c.scope.kind = ScopeKind::kLink;
  c.scope.peer = peer;
  c.scope.device = "tcp";
  c.from = from;
  c.to = to;
  c.reason.counter = "tcp_retransmits";
  return c;
}

struct Fixture {
  std::vector<Change> reported;
  std::vector<int> told_failing;  ///< Options::failing's calls, by peer
  Isolation iso;
  absl::Time t0 = absl::FromUnixSeconds(1000);

  Fixture()
      : iso(Isolation::Options{.rank = 1, .quiet = absl::Seconds(30), .probation = absl::Seconds(10),
                               .link_device = {"shm", "", "tcp", "tcp"}, .host_peers = {0},
                               .failing = [this](int peer) { told_failing.push_back(peer); }},
            [this](const Change& c) { reported.push_back(c); }) {}
};

TEST(Isolation, ALinkJudgedFailingIsToldOnceAtTheJudgement) {
  Fixture f;
  f.iso.judged(judged(2, State::kHealthy, State::kSuspect));
  EXPECT_TRUE(f.told_failing.empty()) << "SUSPECT is not FAILING";
  f.iso.judged(judged(2, State::kSuspect, State::kFailing));
  EXPECT_EQ(f.told_failing, std::vector<int>{2}) << "before any call adopts it";
  Change nvlink = judged(3, State::kHealthy, State::kFailing);
  nvlink.scope = {.kind = ScopeKind::kNvlink, .peer = 3, .gpu = 0, .link = 2, .device = "x"};
  f.iso.judged(nvlink);
  EXPECT_EQ(f.told_failing, (std::vector<int>{2, 3}));
  auto p = f.iso.proposal(f.t0);
  ASSERT_TRUE(p.has_value());
  f.iso.adopted(*p, f.t0);
  // FAILING again while isolated (the peer's word made it so first): nothing new to do.
  f.iso.judged(judged(2, State::kFailing, State::kHealthy));
  f.iso.judged(judged(2, State::kHealthy, State::kFailing));
  EXPECT_EQ(f.told_failing, (std::vector<int>{2, 3}));
  // A port under a rail is the rail's business, not a link's.
  Change port = judged(-1, State::kHealthy, State::kFailing);
  port.scope = {.kind = ScopeKind::kIbPort, .rail = 1, .device = "mlx5_1"};
  f.iso.judged(port);
  EXPECT_EQ(f.told_failing, (std::vector<int>{2, 3}));
}

TEST(Isolation, AFailingLinkIsIsolatedProbedAndReturned) {
  Fixture f;
  EXPECT_FALSE(f.iso.proposal(f.t0).has_value()) << "nothing judged";
  f.iso.judged(judged(2, State::kHealthy, State::kFailing));
  auto p = f.iso.proposal(f.t0);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kIsolateLink, 1, 2}));
  EXPECT_TRUE(f.iso.proposal(f.t0).has_value()) << "proposed until adopted";

  f.iso.adopted(*p, f.t0);
  ASSERT_EQ(f.reported.size(), 1u);
  EXPECT_EQ(f.reported[0].from, State::kFailing) << "what people saw before";
  EXPECT_EQ(f.reported[0].to, State::kIsolated);
  EXPECT_EQ(f.reported[0].scope.peer, 2);
  EXPECT_EQ(f.reported[0].scope.device, "tcp");
  EXPECT_EQ(f.reported[0].reason.counter, "tcp_retransmits");
  EXPECT_FALSE(f.iso.proposal(f.t0 + absl::Seconds(29)).has_value()) << "still quiet";
  // The judge steps down while nothing crosses the link: that brings nothing back early.
  f.iso.judged(judged(2, State::kFailing, State::kHealthy));
  EXPECT_FALSE(f.iso.proposal(f.t0 + absl::Seconds(29)).has_value());

  p = f.iso.proposal(f.t0 + absl::Seconds(30));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kRestoreLink, 1, 2}));
  f.iso.adopted(*p, f.t0 + absl::Seconds(30));
  ASSERT_EQ(f.reported.size(), 2u);
  EXPECT_EQ(f.reported[1].from, State::kIsolated);
  EXPECT_EQ(f.reported[1].to, State::kProbation);
  EXPECT_EQ(f.reported[1].reason.text(), "back in use on probation after 30s isolated");

  EXPECT_FALSE(f.iso.proposal(f.t0 + absl::Seconds(39)).has_value());
  EXPECT_EQ(f.reported.size(), 2u);
  EXPECT_FALSE(f.iso.proposal(f.t0 + absl::Seconds(40)).has_value()) << "nothing to propose";
  ASSERT_EQ(f.reported.size(), 3u) << "the probation ended";
  EXPECT_EQ(f.reported[2].from, State::kProbation);
  EXPECT_EQ(f.reported[2].to, State::kHealthy);
  EXPECT_EQ(f.reported[2].reason.text(), "probation passed: in use 10s without FAILING");
  EXPECT_FALSE(f.iso.proposal(f.t0 + absl::Seconds(100)).has_value());
  EXPECT_EQ(f.reported.size(), 3u);
}

TEST(Isolation, FailingOnProbationIsolatesAgain) {
  Fixture f;
  f.iso.judged(judged(3, State::kHealthy, State::kFailing));
  f.iso.adopted(*f.iso.proposal(f.t0), f.t0);
  f.iso.judged(judged(3, State::kFailing, State::kHealthy));
  const absl::Time probe = f.t0 + absl::Seconds(30);
  f.iso.adopted(*f.iso.proposal(probe), probe);
  f.iso.judged(judged(3, State::kHealthy, State::kFailing));
  auto p = f.iso.proposal(probe + absl::Seconds(1));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kIsolateLink, 1, 3}));
}

TEST(Isolation, AJudgeStillFailingAtTheProbeIsolatesAgainAtOnce) {
  Fixture f;
  f.iso.judged(judged(2, State::kHealthy, State::kFailing));
  f.iso.adopted(*f.iso.proposal(f.t0), f.t0);
  const absl::Time probe = f.t0 + absl::Seconds(30);
  f.iso.adopted(*f.iso.proposal(probe), probe);  // the judge never stepped down
  auto p = f.iso.proposal(probe);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->action, RouteChange::kIsolateLink);
}

// Several scopes speak for one link: its own judge and its NVLinks' (a GPU's, for every link
// on its host). The link's own judge stepping down while the NVLink stays FAILING leaves the
// link failing: restored after its quiet time, it is isolated again at once.
TEST(Isolation, AnNvlinkStillFailingKeepsItsLinkFailingWhateverTheLinksJudgeSays) {
  Fixture f;
  Change nvlink = judged(3, State::kHealthy, State::kFailing);
  nvlink.scope = {.kind = ScopeKind::kNvlink, .peer = 3, .gpu = 0, .link = 2, .device = "x"};
  f.iso.judged(judged(3, State::kHealthy, State::kSuspect));
  f.iso.judged(nvlink);
  f.iso.adopted(*f.iso.proposal(f.t0), f.t0);
  f.iso.judged(judged(3, State::kSuspect, State::kHealthy));  // the link's own counters calm
  const absl::Time probe = f.t0 + absl::Seconds(30);
  auto back = f.iso.proposal(probe);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->action, RouteChange::kRestoreLink);
  f.iso.adopted(*back, probe);
  auto again = f.iso.proposal(probe);
  ASSERT_TRUE(again.has_value()) << "the NVLink never stepped down";
  EXPECT_EQ(again->action, RouteChange::kIsolateLink);
}

TEST(Isolation, ThePeersIsolationIsOursToProbeAndOthersAreNot) {
  Fixture f;
  f.iso.adopted({RouteChange::kIsolateLink, 0, 1}, f.t0);  // rank 0 judged it
  ASSERT_EQ(f.reported.size(), 1u);
  EXPECT_EQ(f.reported[0].to, State::kIsolated);
  EXPECT_EQ(f.reported[0].scope.peer, 0);
  EXPECT_EQ(f.reported[0].reason.text(), "isolated on rank 0's word");
  f.iso.adopted({RouteChange::kIsolateLink, 2, 3}, f.t0);  // not a link of rank 1
  EXPECT_EQ(f.reported.size(), 1u);
  auto p = f.iso.proposal(f.t0 + absl::Seconds(30));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kRestoreLink, 0, 1}));
  // Both ends proposed it; rank 0's won. Adopting it again changes nothing here.
  f.iso.adopted(*p, f.t0 + absl::Seconds(30));
  EXPECT_FALSE(f.iso.proposal(f.t0 + absl::Seconds(31)).has_value());
}

TEST(Isolation, APortFailingUnderARailIsolatesThatRailOfThisRank) {
  Fixture f;
  Change port = judged(-1, State::kHealthy, State::kFailing);
  port.scope = {.kind = ScopeKind::kIbPort, .rail = 1, .link = 1, .device = "mlx5_1"};
  port.reason.counter = "ib_symbol_error";
  f.iso.judged(port);
  auto p = f.iso.proposal(f.t0);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kIsolateRail, 1, 1}));
  EXPECT_EQ(p->describe(), "isolate rail 1 of rank 1");
  f.iso.adopted({RouteChange::kIsolateRail, 0, 1}, f.t0);  // rank 0's rail: not ours
  EXPECT_TRUE(f.reported.empty());
  f.iso.adopted(*p, f.t0);
  ASSERT_EQ(f.reported.size(), 1u);
  EXPECT_EQ(f.reported[0].scope.kind, ScopeKind::kIbPort) << "the port's state shows it";
  EXPECT_EQ(f.reported[0].to, State::kIsolated);
  EXPECT_EQ(f.reported[0].reason.counter, "ib_symbol_error");
  p = f.iso.proposal(f.t0 + absl::Seconds(30));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kRestoreRail, 1, 1}));
  // A port under no rail of this rank is judged, never isolated.
  Fixture g;
  port.scope.rail = -1;
  g.iso.judged(port);
  EXPECT_FALSE(g.iso.proposal(g.t0).has_value());
}

TEST(Isolation, AFailingNvlinkIsolatesTheLinkToItsRankAndAGpuAllOfItsHosts) {
  Fixture f;
  Change nvlink = judged(3, State::kHealthy, State::kFailing);
  nvlink.scope = {.kind = ScopeKind::kNvlink, .peer = 3, .gpu = 0, .link = 2, .device = "x"};
  nvlink.reason.counter = "nvlink_crc_flit";
  f.iso.judged(nvlink);
  auto p = f.iso.proposal(f.t0);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kIsolateLink, 1, 3}));
  f.iso.adopted(*p, f.t0);
  ASSERT_EQ(f.reported.size(), 1u);
  EXPECT_EQ(f.reported[0].scope.kind, ScopeKind::kLink) << "the link's state shows it";
  EXPECT_EQ(f.reported[0].reason.counter, "nvlink_crc_flit");

  Fixture g;
  Change gpu = judged(-1, State::kHealthy, State::kFailing);
  gpu.scope = {.kind = ScopeKind::kGpu, .gpu = 1, .device = "0000:19:00.0"};
  gpu.reason.counter = "ecc_uncorrected";
  g.iso.judged(gpu);
  p = g.iso.proposal(g.t0);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(*p, (RouteChange{RouteChange::kIsolateLink, 0, 1})) << "rank 0 shares the host";
  g.iso.adopted(*p, g.t0);
  EXPECT_FALSE(g.iso.proposal(g.t0).has_value()) << "no other rank on the host";
  EXPECT_EQ(g.reported.at(0).scope.device, "shm");
}

TEST(Isolation, WhatTheRouteCouldNotDoShowsInTheReason) {
  Fixture f;
  f.iso.judged(judged(2, State::kHealthy, State::kFailing));
  f.iso.adopted(*f.iso.proposal(f.t0), f.t0, "no ring avoids it: it still carries traffic");
  ASSERT_EQ(f.reported.size(), 1u);
  EXPECT_EQ(f.reported[0].reason.counter, "tcp_retransmits");
  EXPECT_NE(f.reported[0].reason.text().find("; no ring avoids it"), std::string::npos)
      << f.reported[0].reason.text();
}

TEST(Isolation, OnlyTheJudgesWordsAboutLinksCount) {
  Fixture f;
  Change rail = judged(2, State::kHealthy, State::kFailing);
  rail.scope.kind = ScopeKind::kRail;
  f.iso.judged(rail);
  f.iso.judged(judged(2, State::kHealthy, State::kIsolated));  // a report of its own, echoed
  f.iso.judged(judged(1, State::kHealthy, State::kFailing));   // itself
  EXPECT_FALSE(f.iso.proposal(f.t0).has_value());
  f.iso.judged(judged(0, State::kHealthy, State::kSuspect));
  EXPECT_FALSE(f.iso.proposal(f.t0).has_value()) << "SUSPECT isolates nothing";
}

}  // namespace
}  // namespace weft
