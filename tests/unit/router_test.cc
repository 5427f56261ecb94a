// The router's ring around isolated links: the usual ring when nothing is isolated, a ring
// that avoids every isolated link where one exists (checked against brute force on small
// graphs), and a proof that none exists where it does not.
#include "src/router.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace weft {
namespace {

std::vector<std::vector<int>> hosts_of_sizes(const std::vector<int>& sizes) {
  std::vector<std::vector<int>> hosts;
  int rank = 0;
  for (int n : sizes) {
    hosts.emplace_back();
    for (int i = 0; i < n; ++i) hosts.back().push_back(rank++);
  }
  return hosts;
}

// Why `ring` is not a valid ring over `hosts` avoiding `isolated`, with the hosts in at most
// `pieces` pieces (0: one each); empty when it is.
std::string ring_problem(const std::vector<int>& ring, const std::vector<std::vector<int>>& hosts,
                         const LinkSet& isolated, size_t pieces = 0) {
  std::vector<int> host_of;
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int r : hosts[h]) {
      if (host_of.size() <= static_cast<size_t>(r)) host_of.resize(r + 1, -1);
      host_of[r] = static_cast<int>(h);
    }
  }
  std::vector<int> sorted = ring;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> all(host_of.size());
  std::iota(all.begin(), all.end(), 0);
  if (sorted != all) return "not every rank exactly once";
  size_t host_changes = 0;
  for (size_t i = 0; i < ring.size(); ++i) {
    const int a = ring[i], b = ring[(i + 1) % ring.size()];
    if (ring.size() > 1 && isolated.has(a, b)) {
      return "ranks " + std::to_string(a) + " and " + std::to_string(b) + " are neighbours";
    }
    if (host_of[a] != host_of[b]) ++host_changes;
  }
  if (pieces == 0) pieces = hosts.size();
  if (hosts.size() > 1 && (host_changes < hosts.size() || host_changes > pieces)) {
    return "a host's ranks are split more than its links need";
  }
  return "";
}

// Whether any ring of single-rank hosts avoids `isolated`: every order, rank 0 first.
bool ring_exists(int n, const LinkSet& isolated) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  do {
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) ok = !isolated.has(order[i], order[(i + 1) % n]);
    if (ok) return true;
  } while (std::next_permutation(order.begin() + 1, order.end()));
  return false;
}

TEST(Router, NothingIsolatedKeepsHostsInOrderOfTheirLowestRank) {
  std::vector<PeerInfo> peers(5);
  const char* host_of[] = {"a", "b", "a", "c", "b"};
  for (int r = 0; r < 5; ++r) peers[r].rank = r, peers[r].host_id = host_of[r];
  const auto hosts = ranks_by_host(peers);
  ASSERT_EQ(hosts, (std::vector<std::vector<int>>{{0, 2}, {1, 4}, {3}}));
  const RingSearch found = ring_avoiding(hosts, LinkSet());
  ASSERT_TRUE(found.ring.has_value());
  EXPECT_EQ(*found.ring, (std::vector<int>{0, 2, 1, 4, 3}));
}

TEST(Router, FourHostsGoAroundTheirIsolatedLink) {
  LinkSet isolated;
  isolated.add(2, 1);
  const RingSearch found = ring_avoiding(hosts_of_sizes({1, 1, 1, 1}), isolated);
  ASSERT_TRUE(found.ring.has_value());
  EXPECT_EQ(*found.ring, (std::vector<int>{0, 1, 3, 2}));  // h0 h1 h3 h2, as in issue 22
}

TEST(Router, ThreeHostsWithAnIsolatedLinkHaveNoRing) {
  LinkSet isolated;
  isolated.add(1, 2);
  const RingSearch found = ring_avoiding(hosts_of_sizes({1, 1, 1}), isolated);
  EXPECT_FALSE(found.ring.has_value());
  EXPECT_TRUE(found.exhausted) << "proved, not given up";
}

TEST(Router, TwoRanksWithTheirOnlyLinkIsolatedHaveNoRing) {
  LinkSet isolated;
  isolated.add(0, 1);
  EXPECT_FALSE(ring_avoiding(hosts_of_sizes({2}), isolated).ring.has_value());
  EXPECT_FALSE(ring_avoiding(hosts_of_sizes({1, 1}), isolated).ring.has_value());
  EXPECT_TRUE(ring_avoiding(hosts_of_sizes({1}), LinkSet()).ring.has_value());
}

TEST(Router, AHostLinesUpItsRanksAroundAnIsolatedLinkInside) {
  LinkSet isolated;
  isolated.add(0, 1);  // inside host 0 (ranks 0-2), like an isolated NVLink
  const auto hosts = hosts_of_sizes({3, 2});
  const RingSearch found = ring_avoiding(hosts, isolated);
  ASSERT_TRUE(found.ring.has_value());
  EXPECT_EQ(ring_problem(*found.ring, hosts, isolated), "");
}

TEST(Router, AHostWhoseRanksCannotLineUpGoesInPieces) {
  // Two hosts of two ranks, the link inside host 1 isolated (its GPUs' NVLink): the ring
  // visits rank 2 and rank 3 apart, crossing the network four times.
  LinkSet isolated;
  isolated.add(2, 3);
  const auto hosts = hosts_of_sizes({2, 2});
  const RingSearch found = ring_avoiding(hosts, isolated);
  ASSERT_TRUE(found.ring.has_value());
  EXPECT_EQ(ring_problem(*found.ring, hosts, isolated, found.pieces), "");
  EXPECT_EQ(*found.ring, (std::vector<int>{0, 2, 1, 3}));
  // Three ranks on host 1 line up around one link inside: no piece needed.
  const auto three = hosts_of_sizes({2, 3});
  const RingSearch lined = ring_avoiding(three, isolated);
  ASSERT_TRUE(lined.ring.has_value());
  EXPECT_EQ(lined.pieces, 2u);
  EXPECT_EQ(ring_problem(*lined.ring, three, isolated), "");
}

TEST(Router, EntersAHostWhereItsLinksAllow) {
  // Ranks 0 | 1 2 3 | 4: host 1's ring may only be entered and left at ranks that have links
  // to the single-rank hosts around it.
  LinkSet isolated;
  for (int r : {1, 2}) isolated.add(0, r);
  for (int r : {2, 3}) isolated.add(4, r);
  const auto hosts = hosts_of_sizes({1, 3, 1});
  const RingSearch found = ring_avoiding(hosts, isolated);
  ASSERT_TRUE(found.ring.has_value());
  EXPECT_EQ(ring_problem(*found.ring, hosts, isolated), "");
}

// Single-rank hosts: the search is complete there, so it finds a ring exactly when brute
// force does.
TEST(Router, FindsARingExactlyWhenOneExists) {
  std::mt19937 rng(20261202);
  int with = 0, without = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 3 + trial % 5;  // 3-7 hosts
    LinkSet isolated;
    std::bernoulli_distribution cut(0.15 + 0.05 * (trial % 6));
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        if (cut(rng)) isolated.add(a, b);
      }
    }
    const auto hosts = hosts_of_sizes(std::vector<int>(n, 1));
    const RingSearch found = ring_avoiding(hosts, isolated);
    const bool exists = ring_exists(n, isolated);
    ASSERT_EQ(found.ring.has_value(), exists) << "trial " << trial;
    if (found.ring) {
      ++with;
      EXPECT_EQ(ring_problem(*found.ring, hosts, isolated), "") << "trial " << trial;
    } else {
      ++without;
      EXPECT_TRUE(found.exhausted);
    }
  }
  EXPECT_GT(with, 50);
  EXPECT_GT(without, 50);
}

// Several ranks a host, links isolated at random: whatever ring comes back is valid.
TEST(Router, EveryRingFoundIsValid) {
  std::mt19937 rng(7);
  int found_count = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int> sizes(2 + trial % 9);
    for (int& s : sizes) s = 1 + static_cast<int>(rng() % 6);
    const auto hosts = hosts_of_sizes(sizes);
    const int ranks = std::accumulate(sizes.begin(), sizes.end(), 0);
    LinkSet isolated;
    std::bernoulli_distribution cut(0.02 * (trial % 8));
    for (int a = 0; a < ranks; ++a) {
      for (int b = a + 1; b < ranks; ++b) {
        if (cut(rng)) isolated.add(a, b);
      }
    }
    const RingSearch found = ring_avoiding(hosts, isolated);
    if (!found.ring) continue;
    ++found_count;
    EXPECT_EQ(ring_problem(*found.ring, hosts, isolated, found.pieces), "") << "trial " << trial;
  }
  EXPECT_GT(found_count, 200);
}

// The size issue 22 names: 4,096 ranks, 8 a host, 1% of the links between hosts isolated.
// Three hosts of 8, every link between the second and the third isolated (a bad path between
// two hosts): the ring must pass the first host twice, 0-3, 8-15, 4-7, 16-23. Each host stays
// in at most two pieces, not one per rank.
TEST(Router, AHostTheRingMustPassTwiceGoesInTwoHalves) {
  const auto hosts = hosts_of_sizes({8, 8, 8});
  LinkSet isolated;
  for (int a = 8; a < 16; ++a) {
    for (int b = 16; b < 24; ++b) isolated.add(a, b);
  }
  const RingSearch found = ring_avoiding(hosts, isolated);
  ASSERT_TRUE(found.ring.has_value());
  EXPECT_EQ(ring_problem(*found.ring, hosts, isolated, /*pieces=*/6), "");
}

TEST(Router, FindsARingForFourThousandRanks) {
  const auto hosts = hosts_of_sizes(std::vector<int>(512, 8));
  std::mt19937 rng(1);
  LinkSet isolated;
  std::uniform_int_distribution<int> rank(0, 4095);
  while (isolated.size() < 83'000) {  // ~1% of the 8.3 M pairs on different hosts
    const int a = rank(rng), b = rank(rng);
    if (a / 8 != b / 8) isolated.add(a, b);
  }
  const RingSearch found = ring_avoiding(hosts, isolated);
  ASSERT_TRUE(found.ring.has_value());
  EXPECT_EQ(ring_problem(*found.ring, hosts, isolated), "");
}

}  // namespace
}  // namespace weft
