// The route a communicator runs on: a change all ranks adopted isolates or restores a link,
// starts a new epoch and reroutes the ring around it where a ring exists; the algorithms'
// usable links follow; a change that changes nothing starts no epoch.
#include "src/route.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

// `hosts` hosts of `per_host` ranks each, ranks numbered host by host.
std::vector<PeerInfo> peers(int hosts, int per_host) {
  std::vector<PeerInfo> out;
  for (int h = 0; h < hosts; ++h) {
    for (int i = 0; i < per_host; ++i) {
      PeerInfo p;
      p.rank = static_cast<int>(out.size());
      p.host_id = "h" + std::to_string(h);
      out.push_back(p);
    }
  }
  return out;
}

bool ring_crosses(const Schedule& s, int a, int b) {
  const int n = static_cast<int>(s.ring().size());
  const int pa = s.position_of(a), pb = s.position_of(b);
  return (pa + 1) % n == pb || (pb + 1) % n == pa;
}

TEST(Route, IsolatingARingLinkOnFourHostsReroutesAroundIt) {
  Route route(peers(4, 1));
  EXPECT_EQ(route.epoch(), 0u);
  EXPECT_EQ(route.schedule().ring(), (std::vector<int>{0, 1, 2, 3}));
  const std::string line = route.adopt({RouteChange::kIsolateLink, 1, 2});
  EXPECT_EQ(route.epoch(), 1u);
  EXPECT_FALSE(ring_crosses(route.schedule(), 1, 2)) << line;
  EXPECT_NE(line.find("isolate link 1-2"), std::string::npos) << line;
  EXPECT_NE(line.find("no relay"), std::string::npos) << line;
  EXPECT_TRUE(route.usable().ring);
  EXPECT_FALSE(route.usable().every_pair);
  // On four ranks the call check's rounds join every pair the ring does not.
  EXPECT_FALSE(route.usable().rounds) << line;

  EXPECT_EQ(route.adopt({RouteChange::kIsolateLink, 1, 2}), "") << "already isolated: no epoch";
  EXPECT_EQ(route.epoch(), 1u);
  EXPECT_NE(route.adopt({RouteChange::kRestoreLink, 1, 2}), "");
  EXPECT_EQ(route.epoch(), 2u);
  EXPECT_TRUE(route.usable().rounds);
  EXPECT_TRUE(route.usable().every_pair);
  EXPECT_EQ(route.isolated().size(), 0u);
}

TEST(Route, ThreeHostsHaveNoRingAroundALinkAndSaySo) {
  Route route(peers(3, 1));
  const std::vector<int> before = route.schedule().ring();
  const std::string line = route.adopt({RouteChange::kIsolateLink, 0, 2});
  EXPECT_EQ(route.epoch(), 1u);
  EXPECT_FALSE(route.usable().ring);
  EXPECT_EQ(route.schedule().ring(), before) << "the ring stays as it was";
  EXPECT_NE(line.find("still crosses"), std::string::npos) << line;
}

TEST(Route, HostsStayTogetherAroundALinkBetweenThem) {
  Route route(peers(4, 2));  // h0: 0 1, h1: 2 3, h2: 4 5, h3: 6 7
  ASSERT_TRUE(ring_crosses(route.schedule(), 3, 4));
  route.adopt({RouteChange::kIsolateLink, 3, 4});
  EXPECT_TRUE(route.usable().ring);
  EXPECT_FALSE(ring_crosses(route.schedule(), 3, 4));
  // Each host's two ranks are still neighbours: the ring crosses the network once per host.
  for (int h = 0; h < 4; ++h) EXPECT_TRUE(ring_crosses(route.schedule(), 2 * h, 2 * h + 1));
}

TEST(Route, ALinkInsideAHostSplitsItAndSaysWhatThatCosts) {
  Route route(peers(2, 2));  // h0: 0 1, h1: 2 3
  const std::string line = route.adopt({RouteChange::kIsolateLink, 2, 3});
  EXPECT_TRUE(route.usable().ring);
  EXPECT_FALSE(ring_crosses(route.schedule(), 2, 3)) << line;
  EXPECT_NE(line.find("crosses the network 4 times instead of 2"), std::string::npos) << line;
}

// Counted on the ring: on one host the ring never crosses the network, however its ranks
// are ordered around an isolated link.
TEST(Route, OnOneHostALinkIsolatedSaysNothingOfTheNetwork) {
  for (const auto& [a, b] : {std::pair{0, 1}, {0, 3}, {1, 2}}) {
    Route route(peers(1, 4));
    const std::string line = route.adopt({RouteChange::kIsolateLink, static_cast<uint32_t>(a),
                                          static_cast<uint32_t>(b)});
    EXPECT_TRUE(route.usable().ring);
    EXPECT_FALSE(ring_crosses(route.schedule(), a, b)) << line;
    EXPECT_EQ(line.find("network"), std::string::npos) << line;
  }
  // Two hosts, rank 1's GPU failing: its links to its host are isolated. The ring goes
  // 0 ... across ... and back: counted on the ring, not as one piece per rank.
  Route two(peers(2, 4));  // h0: 0 1 2 3, h1: 4 5 6 7
  two.adopt({RouteChange::kIsolateLink, 0, 1});
  two.adopt({RouteChange::kIsolateLink, 1, 2});
  const std::string line = two.adopt({RouteChange::kIsolateLink, 1, 3});
  ASSERT_TRUE(two.usable().ring) << line;
  const std::vector<int>& ring = two.schedule().ring();
  size_t crossings = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    crossings += (ring[i] < 4) != (ring[(i + 1) % ring.size()] < 4);
  }
  if (crossings > 2) {
    EXPECT_NE(line.find(absl::StrCat("crosses the network ", crossings, " times instead of 2")),
              std::string::npos) << line;
  } else {
    EXPECT_EQ(line.find("network"), std::string::npos) << line;
  }
}

TEST(Route, ARailIsolatedKeepsTheRingAndStartsAnEpoch) {
  Route route(peers(4, 1));
  const std::string line = route.adopt({RouteChange::kIsolateRail, 2, 1});
  EXPECT_EQ(route.epoch(), 1u);
  EXPECT_TRUE(route.rail_isolated(2, 1));
  EXPECT_FALSE(route.rail_isolated(2, 0));
  EXPECT_FALSE(route.rail_isolated(1, 1));
  EXPECT_EQ(route.schedule().ring(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_NE(line.find("isolate rail 1 of rank 2"), std::string::npos) << line;
  EXPECT_TRUE(route.usable().every_pair) << "every link still has a rail";
  EXPECT_EQ(route.adopt({RouteChange::kIsolateRail, 2, 1}), "");
  EXPECT_NE(route.adopt({RouteChange::kRestoreRail, 2, 1}), "");
  EXPECT_FALSE(route.rail_isolated(2, 1));
  EXPECT_EQ(route.epoch(), 2u);
}

}  // namespace
}  // namespace weft
