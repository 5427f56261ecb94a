// Rails of the tcp transport (transport/tcp/rails.hpp), before any link: the published
// address lists, subnets, how a link pairs its rails with the peer's addresses, and which
// interfaces WEFT_SOCKET_IFNAME names. Links over rails are in tcp_rail_links_test.cc.
// Tests that need several interfaces run in a RailNamespace and are skipped where one
// cannot be made (not root).
#include <netinet/in.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/unit/rail_namespace.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/rails.hpp"

namespace weft::transport::tcp {
namespace {

SockAddr addr(const char* text) {
  auto a = parse_address(text);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : SockAddr{};
}
Rail rail(const char* ip, int bits) { return Rail{"test", *make_sockaddr(ip, 0), bits}; }

// ---- published address lists ----

TEST(TcpRails, ParsesAndFormatsAddressLists) {
  auto one = parse_address_list("127.0.0.1:8080");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ(format_address_list(*one), "127.0.0.1:8080");  // a single rail: the old form
  auto two = parse_address_list("198.18.0.1:5,[fd00::1]:6");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].family(), AF_INET);
  EXPECT_EQ((*two)[1].family(), AF_INET6);
  EXPECT_EQ((*two)[1].port(), 6);
  EXPECT_EQ(format_address_list(*two), "198.18.0.1:5,[fd00::1]:6");

  std::vector<std::string> most(kMaxRails, "10.0.0.1:1");
  EXPECT_TRUE(parse_address_list(absl::StrJoin(most, ",")).ok());
  most.push_back("10.0.0.1:2");
  auto too_many = parse_address_list(absl::StrJoin(most, ","));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find(absl::StrCat(kMaxRails)), absl::string_view::npos)
      << too_many.status();
  EXPECT_FALSE(parse_address_list(std::string(100000, ',')).ok());
  for (const char* bad : {"", ",", "1.2.3.4:5,", ",1.2.3.4:5", "1.2.3.4:5,,1.2.3.4:6",
                          "1.2.3.4:5;1.2.3.4:6", "1.2.3.4:5, 1.2.3.4:6", "1.2.3.4:5,[::1]",
                          "1.2.3.4:5,1.2.3.4", "[::1]:5,[::1:6"}) {
    EXPECT_FALSE(parse_address_list(bad).ok()) << bad;
  }
  auto named = parse_address_list("1.2.3.4:5,host:6");
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("host:6"), absl::string_view::npos) << named.status();
}

// ---- subnets and routes ----

TEST(TcpRails, MatchesSubnets) {
  EXPECT_TRUE(on_rail(rail("198.18.0.1", 24), addr("198.18.0.200:1")));
  EXPECT_FALSE(on_rail(rail("198.18.0.1", 24), addr("198.18.1.1:1")));
  EXPECT_TRUE(on_rail(rail("198.18.0.1", 20), addr("198.18.15.1:1")));
  EXPECT_FALSE(on_rail(rail("198.18.0.1", 20), addr("198.18.16.1:1")));
  EXPECT_TRUE(on_rail(rail("198.18.0.1", 0), addr("10.1.2.3:1")));
  EXPECT_TRUE(on_rail(rail("127.0.0.1", 8), addr("127.0.0.1:1")));
  EXPECT_TRUE(on_rail(rail("fd00::1", 64), addr("[fd00::ffff]:1")));
  EXPECT_FALSE(on_rail(rail("fd00::1", 64), addr("[fd00:0:0:1::1]:1")));
  EXPECT_FALSE(on_rail(rail("198.18.0.1", 0), addr("[fd00::1]:1")));  // families differ
}

bool same_routes(const std::vector<Route>& got, std::vector<std::pair<int, size_t>> want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].local_rail != want[i].first || got[i].remote != want[i].second) return false;
  }
  return true;
}

TEST(TcpRails, PlansOneRoutePerSharedRail) {
  const std::vector<Rail> local = {rail("198.18.0.1", 24), rail("198.18.1.1", 24)};
  const std::vector<SockAddr> both = {addr("198.18.1.2:5"), addr("198.18.0.2:6")};
  EXPECT_TRUE(same_routes(plan_routes(local, both, kMaxRails), {{0, 1}, {1, 0}}));
  EXPECT_TRUE(same_routes(plan_routes(local, both, 1), {{0, 1}}));  // single_rail
  // The peer left rail 0 out: the link runs over rail 1 alone.
  EXPECT_TRUE(same_routes(plan_routes(local, {addr("198.18.1.2:5")}, kMaxRails), {{1, 0}}));
  // We left rail 1 out.
  EXPECT_TRUE(same_routes(plan_routes({local[0]}, both, kMaxRails), {{0, 1}}));
  // Two peer addresses on one of our rails: one socket, one rail.
  EXPECT_TRUE(same_routes(
      plan_routes(local, {addr("198.18.0.2:5"), addr("198.18.0.3:6")}, kMaxRails), {{0, 0}}));
  // No subnet in common (a routed network): the peer's first address, as before rails.
  EXPECT_TRUE(same_routes(
      plan_routes(local, {addr("10.0.0.1:5"), addr("10.0.1.1:6")}, kMaxRails), {{-1, 0}}));
}

// ---- interfaces ----

TEST(TcpRails, ChoosesTheInterfacesNamed) {
  WEFT_REQUIRE_RAILS(ns);
  auto two = choose_rails("weftr0,weftr1");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].ifname, "weftr0");
  EXPECT_EQ((*two)[0].addr.ip(), "198.18.0.1");
  EXPECT_EQ((*two)[0].prefix_bits, 24);
  EXPECT_EQ((*two)[1].addr.ip(), "198.18.1.1");

  auto reversed = choose_rails(" weftr1 , weftr0 ");
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  ASSERT_EQ(reversed->size(), 2u);
  EXPECT_EQ((*reversed)[0].ifname, "weftr1");
  auto ip = choose_listen_ip("weftr1,weftr0");  // the bootstrap's: the first rail
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_EQ(*ip, "198.18.1.1");

  // A prefix takes every interface that starts with it and is usable (weftr2 is down).
  auto prefix = choose_rails("weftr");
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  ASSERT_EQ(prefix->size(), 2u);
  EXPECT_EQ((*prefix)[0].ifname, "weftr0");
  EXPECT_EQ((*prefix)[1].ifname, "weftr1");

  auto repeated = choose_rails("weftr0,weftr0,weftr");
  ASSERT_TRUE(repeated.ok()) << repeated.status();
  EXPECT_EQ(repeated->size(), 2u);

  auto down = choose_rails("weftr0,weftr2");
  EXPECT_EQ(down.status().code(), absl::StatusCode::kFailedPrecondition) << down.status();
  EXPECT_NE(down.status().message().find("weftr2"), absl::string_view::npos) << down.status();
  auto all_down = choose_rails("weftx");
  EXPECT_EQ(all_down.status().code(), absl::StatusCode::kFailedPrecondition) << all_down.status();
  auto missing = choose_rails("weftr0,weftnosuch");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_NE(missing.status().message().find("weftnosuch"), absl::string_view::npos);
  EXPECT_NE(missing.status().message().find("weftr0,weftnosuch"), absl::string_view::npos);

  TransportInit init;
  init.rank = 0, init.size = 1, init.socket_ifname = "weftr0,weftr1";
  auto t = make_transport(init);
  ASSERT_TRUE(t.ok()) << t.status();
  auto published = parse_address_list((*t)->address());
  ASSERT_TRUE(published.ok()) << published.status();
  ASSERT_EQ(published->size(), 2u);
  EXPECT_EQ((*published)[0].ip(), "198.18.0.1");
  EXPECT_EQ((*published)[1].ip(), "198.18.1.1");
  init.socket_ifname = "weftr1";
  auto single = make_transport(init);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ((*single)->address().rfind("198.18.1.1:", 0), 0u) << (*single)->address();
  EXPECT_EQ((*single)->address().find(','), std::string::npos) << (*single)->address();
}

}  // namespace
}  // namespace weft::transport::tcp
