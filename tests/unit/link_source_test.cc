// The link source against real tcp sockets on loopback: TCP_INFO read per rail while the
// link carries data, summed on the link, with the transports' own observations (stalls,
// failed connects) alongside.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "src/base/deadline.hpp"
#include "src/health/link_source.hpp"
#include "transport/tcp/pair.hpp"

namespace weft::health {
namespace {

// Two connected tcp sockets on 127.0.0.1, or {-1, -1}.
std::pair<int, int> loopback_pair() {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 4) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(listener);
    return {-1, -1};
  }
  const int a = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(a, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(a);
    ::close(listener);
    return {-1, -1};
  }
  const int b = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  return {a, b};
}

// Two-rail tcp link between rank 0 and rank 1, both ends in this process.
struct TwoRailLink {
  std::unique_ptr<transport::tcp::TcpPair> zero, one;
  std::vector<int> a, b;  // rank 0's and rank 1's sockets: rail 0 and 1 data, then control
  TwoRailLink() {
    // Two sockets a rail: data, then control (transport/tcp/pair.hpp).
    for (int k = 0; k < 4; ++k) {
      auto [x, y] = loopback_pair();
      if (x < 0) return;
      a.push_back(x);
      b.push_back(y);
    }
    const transport::TransportInit init;
    zero = std::make_unique<transport::tcp::TcpPair>(a, 0, 1, "loopback", init);
    one = std::make_unique<transport::tcp::TcpPair>(b, 1, 0, "loopback", init);
  }
  // Sends `bytes` from zero to one, spread over both rails (stripes are 512 KiB).
  bool carry(size_t bytes) {
    std::vector<std::byte> out(bytes, std::byte{7}), in(bytes);
    size_t sent = 0, got = 0;
    const Deadline deadline = Deadline::after(absl::Seconds(20));
    while ((sent < bytes || got < bytes) && !deadline.expired()) {
      if (sent < bytes) {
        auto n = zero->send_some(out.data() + sent, bytes - sent);
        if (!n.ok()) return false;
        sent += *n;
      }
      auto m = one->recv_into(in.data() + got, bytes - got);
      if (!m.ok()) return false;
      got += *m;
    }
    return got == bytes;
  }
};

std::map<std::string, double> counters_of(const Sample& s) {
  std::map<std::string, double> m;
  for (const Counter& c : s.counters) m[c.name] = c.value;
  return m;
}

TEST(LinkSource, ReadsTcpInfoPerRailAndSumsItOnTheLink) {
  TwoRailLink link;
  ASSERT_NE(link.zero, nullptr);
  ASSERT_TRUE(link.carry(4 << 20));
  link.zero->note_stall();
  LinkSource source(
      [&](absl::FunctionRef<void(const LinkView&)> visit) {
        visit({1, "tcp", link.zero.get(), 2});
        visit({3, "tcp", nullptr, 1});  // a peer whose connect failed: no link
      },
      {"weft-r0", "lo"});
  std::vector<Sample> out;
  source.sample(absl::Now(), out);
  // The link to rank 1, its two paths (both leave from lo: the second is named apart), and
  // rank 3's link.
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].scope.kind, ScopeKind::kLink);
  EXPECT_EQ(out[0].scope.peer, 1);
  EXPECT_EQ(out[1].scope.kind, ScopeKind::kRail);
  EXPECT_EQ(out[1].scope.device, "lo");
  EXPECT_EQ(out[1].scope.rail, 1);  // lo is the second rail listed
  EXPECT_EQ(out[2].scope.device, "lo#1");
  EXPECT_EQ(out[2].scope.rail, 3);  // on no listed rail: numbered past them
  auto link_counters = counters_of(out[0]);
  auto rail0 = counters_of(out[1]);
  auto rail1 = counters_of(out[2]);
  EXPECT_EQ(link_counters["link_stalls"], 1);
  EXPECT_EQ(link_counters["link_failed_connects"], 2);
  EXPECT_EQ(link_counters["link_bytes_sent"], 4 << 20);
  // Each socket carried half of the 512 KiB stripes, and the link has the sum.
  EXPECT_GE(rail0["tcp_bytes_acked"], 2 << 20);
  EXPECT_GE(rail1["tcp_bytes_acked"], 2 << 20);
  EXPECT_EQ(link_counters["tcp_bytes_acked"], rail0["tcp_bytes_acked"] + rail1["tcp_bytes_acked"]);
  EXPECT_EQ(rail0.count("tcp_retransmits"), 1u);
  EXPECT_GT(rail0["tcp_rtt_us"], 0);
  EXPECT_EQ(link_counters.count("tcp_rtt_us"), 0u);  // levels are not summed
  EXPECT_EQ(counters_of(out[3])["link_failed_connects"], 1);
  EXPECT_EQ(out[3].counters.size(), 1u);
}

TEST(LinkSource, CountersOfAPathGrowWithTraffic) {
  TwoRailLink link;
  ASSERT_NE(link.zero, nullptr);
  std::vector<Sample> before, after;
  LinkSource source([&](absl::FunctionRef<void(const LinkView&)> visit) {
    visit({1, "tcp", link.zero.get(), 0});
  }, {});
  source.sample(absl::Now(), before);
  ASSERT_TRUE(link.carry(1 << 20));
  source.sample(absl::Now(), after);
  // 1 MiB is two stripes, one per socket, each cut in frames with a 40-byte header
  // (transport/tcp/frame.hpp) of at most 128 KiB here (one send call's worth).
  const double rail0 =
      counters_of(after[1])["tcp_bytes_acked"] - counters_of(before[1])["tcp_bytes_acked"];
  const double both =
      counters_of(after[0])["tcp_bytes_acked"] - counters_of(before[0])["tcp_bytes_acked"];
  EXPECT_GE(rail0, 512 << 10);
  EXPECT_LE(rail0, (512 << 10) + 64 * 32);
  EXPECT_GE(both, 1 << 20);
  EXPECT_LE(both, (1 << 20) + 128 * 32);
  EXPECT_EQ(after[1].scope.rail, 0);  // no rails listed: numbered by its place on the link
}

// A rail whose sockets died FAILs on its own (path_down); when every rail of the link has
// died the link itself says so (link_every_rail_down), so that isolation takes the link out
// of the ring instead of leaving it on a relay path.
TEST(LinkSource, ALinkWhoseEveryRailDiedSaysSo) {
  TwoRailLink link;
  ASSERT_NE(link.zero, nullptr);
  LinkSource source([&](absl::FunctionRef<void(const LinkView&)> visit) {
    visit({1, "tcp", link.zero.get(), 0});
  }, {"lo"});
  // Rank 1's end of `rail` goes away; rank 0 sends until its link has seen the rail die.
  const auto kill_rail_and_sample = [&](int rail) {
    ::shutdown(link.b[rail], SHUT_RDWR);
    ::shutdown(link.b[2 + rail], SHUT_RDWR);
    std::vector<std::byte> bytes(1 << 16);
    std::vector<Sample> out;
    const Deadline deadline = Deadline::after(absl::Seconds(10));
    while (!deadline.expired()) {
      (void)link.zero->send_some(bytes.data(), bytes.size());
      out.clear();
      source.sample(absl::Now(), out);
      if (out.size() == 3 && counters_of(out[1 + rail])["path_down"] == 1) break;
    }
    return out;
  };
  std::vector<Sample> out;
  source.sample(absl::Now(), out);
  EXPECT_EQ(counters_of(out[0])["link_every_rail_down"], 0);

  out = kill_rail_and_sample(0);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(counters_of(out[1])["path_down"], 1);
  EXPECT_EQ(counters_of(out[2])["path_down"], 0);
  EXPECT_EQ(counters_of(out[0])["link_every_rail_down"], 0) << "rail 1 still carries the link";

  out = kill_rail_and_sample(1);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(counters_of(out[2])["path_down"], 1);
  EXPECT_EQ(counters_of(out[0])["link_every_rail_down"], 1);
}

}  // namespace
}  // namespace weft::health
