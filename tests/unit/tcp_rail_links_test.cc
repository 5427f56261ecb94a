// tcp links over rails: striping a stream over a link's sockets, links between hosts with
// different rails, and hellos that get the rails wrong. Ranks are threads of this process;
// tests that need several interfaces run in a RailNamespace and are skipped where one cannot
// be made (not root). tcp_rails_test.cc covers rails before any link.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/base/deadline.hpp"
#include "src/base/peer_info.hpp"
#include "tests/unit/rail_namespace.hpp"
#include "tests/unit/raw_socket.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/pair.hpp"
#include "transport/tcp/rails.hpp"
#include "tests/unit/stopwatch.hpp"

namespace weft::transport::tcp {
namespace {

const JobSecret kSecret = fresh_secret();

uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

SockAddr addr(const char* text) {
  auto a = parse_address(text);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *a : SockAddr{};
}

/// Ranks that are threads of this process, each with its own WEFT_SOCKET_IFNAME.
struct Ranks {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<PeerInfo> infos;
};

Ranks make_ranks(const std::vector<std::string>& ifnames, uint64_t job = random_seed(),
                 int path_timeout_ms = TransportInit{}.path_timeout_ms) {
  Ranks r;
  const int n = static_cast<int>(ifnames.size());
  for (int i = 0; i < n; ++i) {
    TransportInit init;
    init.rank = i, init.size = n, init.job_id = job, init.secret = kSecret;
    init.socket_ifname = ifnames[i], init.path_timeout_ms = path_timeout_ms;
    auto t = make_transport(init);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return Ranks{};
    PeerInfo info;
    info.rank = i, info.pid = getpid(), info.host_id = local_host_id();
    info.addresses = {{"tcp", (*t)->address()}};
    r.transports.push_back(std::move(*t));
    r.infos.push_back(std::move(info));
  }
  return r;
}

/// Runs body(0) and body(1) on two threads.
std::vector<absl::Status> on_two_threads(const std::function<absl::Status(int)>& body) {
  std::vector<absl::Status> out(2);
  std::thread other([&] { out[1] = body(1); });
  out[0] = body(0);
  other.join();
  return out;
}

/// Connects ranks 0 and 1 of `r`; the pairs are tcp pairs.
bool connect_pair(Ranks& r, std::unique_ptr<Pair>& a, std::unique_ptr<Pair>& b,
                  absl::Duration timeout = absl::Seconds(20)) {
  const Deadline deadline = Deadline::after(timeout);
  const auto st = on_two_threads([&](int side) -> absl::Status {
    auto p = r.transports[side]->connect(r.infos[1 - side], deadline);
    if (!p.ok()) return p.status();
    (side == 0 ? a : b) = std::move(*p);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  return a != nullptr && b != nullptr;
}

size_t rails_of(const std::unique_ptr<Pair>& p) {
  auto* tcp = dynamic_cast<TcpPair*>(p.get());
  return tcp == nullptr ? 0 : tcp->rails();
}

std::byte pattern(uint64_t seed, uint64_t i) {
  return static_cast<std::byte>(((i + seed) * 0x9E3779B97F4A7C15ull) >> 56);
}

/// Each side sends `bytes[side]` to the other at once, in random slices, and receives with
/// random limits; true when everything arrived intact.
bool exchange(Pair& a, Pair& b, const size_t bytes[2], uint64_t seed) {
  std::vector<std::byte> msg[2], got[2];
  for (int s = 0; s < 2; ++s) {
    msg[s].resize(bytes[s]);
    for (size_t i = 0; i < bytes[s]; ++i) msg[s][i] = pattern(seed + s, i);
    got[s].resize(bytes[1 - s]);
  }
  Pair* pairs[2] = {&a, &b};
  const auto st = on_two_threads([&](int s) -> absl::Status {
    std::mt19937_64 rng(seed + 10 + s);
    auto pick = [&](size_t left) {
      static constexpr size_t kCaps[] = {1, 100, 4096, 300000, 2 << 20};
      return std::min(left, 1 + rng() % kCaps[rng() % 5]);
    };
    const Deadline deadline = Deadline::after(absl::Seconds(60));
    size_t sent = 0, received = 0;
    while (sent < msg[s].size() || received < got[s].size()) {
      if (deadline.expired()) return deadline_error("the test's messages");
      if (sent < msg[s].size()) {
        auto n = pairs[s]->send_some(msg[s].data() + sent, pick(msg[s].size() - sent));
        if (!n.ok()) return n.status();
        sent += *n;
      }
      if (received < got[s].size()) {
        const size_t max = pick(got[s].size() - received);
        auto n = pairs[s]->recv_some(max, [&](const std::byte* d, size_t len) {
          std::memcpy(got[s].data() + received, d, std::min(len, got[s].size() - received));
          received += len;
        });
        if (!n.ok()) return n.status();
        if (*n > max || received > got[s].size()) return absl::InternalError("took too much");
      }
      std::this_thread::yield();
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  EXPECT_EQ(got[1], msg[0]) << bytes[0] << " bytes from rank 0";
  EXPECT_EQ(got[0], msg[1]) << bytes[1] << " bytes from rank 1";
  return st[0].ok() && st[1].ok() && got[1] == msg[0] && got[0] == msg[1];
}

/// The bytes rail `rail` of a `rails`-rail link carries of a stream of `total` bytes.
uint64_t bytes_on_rail(uint64_t total, size_t rail, size_t rails) {
  uint64_t sum = 0;
  for (uint64_t chunk = 0; chunk * kStripeBytes < total; ++chunk) {
    if (chunk % rails == rail) sum += std::min<uint64_t>(kStripeBytes, total - chunk * kStripeBytes);
  }
  return sum;
}

TEST(TcpRailLinks, StripesMessagesOfManyChunksInRandomSlices) {
  WEFT_REQUIRE_RAILS(ns);
  const uint64_t seed = random_seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  Ranks r = make_ranks({"weftr0,weftr1", "weftr0,weftr1"});
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, a, b));
  ASSERT_EQ(rails_of(a), 2u);
  ASSERT_EQ(rails_of(b), 2u);
  // 37 chunks and a piece one way, a few chunks the other; then odd sizes that leave the
  // stream offsets in the middle of chunks, and one that starts there and spans many.
  const size_t sizes[][2] = {{37 * kStripeBytes + 12345, 3 * kStripeBytes + 1},
                             {1, 7},
                             {kStripeBytes - 3, 100000},
                             {9 * kStripeBytes + 77, 5 * kStripeBytes - 1}};
  uint64_t total[2] = {0, 0};
  for (const auto& pair_sizes : sizes) {
    ASSERT_TRUE(exchange(*a, *b, pair_sizes, seed + total[0]));
    total[0] += pair_sizes[0], total[1] += pair_sizes[1];
  }
  auto& ta = dynamic_cast<TcpPair&>(*a);
  auto& tb = dynamic_cast<TcpPair&>(*b);
  for (size_t rail = 0; rail < 2; ++rail) {
    SCOPED_TRACE(absl::StrCat("rail ", rail));
    EXPECT_EQ(ta.rail_stats(rail).bytes_sent, bytes_on_rail(total[0], rail, 2));
    EXPECT_EQ(tb.rail_stats(rail).bytes_received, bytes_on_rail(total[0], rail, 2));
    EXPECT_EQ(tb.rail_stats(rail).bytes_sent, bytes_on_rail(total[1], rail, 2));
    EXPECT_EQ(ta.rail_stats(rail).bytes_received, bytes_on_rail(total[1], rail, 2));
  }
  EXPECT_EQ(ta.stats().bytes_sent, total[0]);
  EXPECT_EQ(ta.stats().bytes_received, total[1]);
  EXPECT_EQ(ta.rail_stats(2).bytes_sent, 0u);  // no such rail
}

// A rail taken out of use (a route change both ends adopt between messages) carries no more
// data either way, its sockets stay open, and it carries again once back; the last rail of a
// link is never taken out.
TEST(TcpRailLinks, ARailOutOfUseCarriesNothingUntilBack) {
  WEFT_REQUIRE_RAILS(ns);
  const uint64_t seed = random_seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  Ranks r = make_ranks({"weftr0,weftr1", "weftr0,weftr1"});
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, a, b));
  auto& ta = dynamic_cast<TcpPair&>(*a);
  auto& tb = dynamic_cast<TcpPair&>(*b);
  const size_t sizes[2] = {9 * kStripeBytes + 77, 5 * kStripeBytes - 1};
  ASSERT_TRUE(exchange(*a, *b, sizes, seed));
  const uint64_t before[2] = {ta.rail_stats(1).bytes_sent, tb.rail_stats(1).bytes_sent};
  EXPECT_GT(before[0], 0u);
  a->use_rail("weftr1", false);
  b->use_rail("weftr1", false);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(exchange(*a, *b, sizes, seed + 1 + i));
  EXPECT_EQ(ta.rail_stats(1).bytes_sent, before[0]) << "rail 1 carried data out of use";
  EXPECT_EQ(tb.rail_stats(1).bytes_sent, before[1]);
  // Rail 0 is the last in use: it stays.
  a->use_rail("weftr0", false);
  b->use_rail("weftr0", false);
  ASSERT_TRUE(exchange(*a, *b, sizes, seed + 5));
  EXPECT_GT(ta.rail_stats(0).bytes_sent, 0u);
  EXPECT_EQ(ta.rail_stats(1).bytes_sent, before[0]);
  a->use_rail("weftr1", true);
  b->use_rail("weftr1", true);
  ASSERT_TRUE(exchange(*a, *b, sizes, seed + 6));
  EXPECT_GT(ta.rail_stats(1).bytes_sent, before[0]) << "rail 1 back in use";
  EXPECT_GT(tb.rail_stats(1).bytes_sent, before[1]);
  EXPECT_EQ(ta.stats().path_failures, 0u);
}

// A host takes a rail out of use by leaving it out of its WEFT_SOCKET_IFNAME; links to and
// from it run over the rails both ends have, or over the peer's first address when they
// share no subnet.
TEST(TcpRailLinks, TwoRailsMeetOneRail) {
  WEFT_REQUIRE_RAILS(ns);
  const std::vector<std::vector<std::string>> cases = {
      {"weftr0,weftr1", "weftr1"},  // the listener has rail 1 only
      {"weftr1", "weftr0,weftr1"},  // the dialer has rail 1 only
      {"weftr0,weftr1", "lo"},      // no common subnet: the peer's first address
      {"lo", "weftr1,weftr0"},
  };
  for (const auto& ifnames : cases) {
    SCOPED_TRACE(absl::StrJoin(ifnames, " meets "));
    Ranks r = make_ranks(ifnames);
    ASSERT_EQ(r.transports.size(), 2u);
    std::unique_ptr<Pair> a, b;
    ASSERT_TRUE(connect_pair(r, a, b));
    EXPECT_EQ(rails_of(a), 1u);
    EXPECT_EQ(rails_of(b), 1u);
    const size_t bytes[2] = {3 * kStripeBytes + 5, 2 * kStripeBytes};
    EXPECT_TRUE(exchange(*a, *b, bytes, random_seed()));
  }
}

// ---- hellos that get the rails wrong ----

/// While it lives, rank `self` of `r` waits in connect() for rank `peer` (and so serves its
/// listener: a listener answers hellos only while some connect() runs), for at most `wait`.
class Serving {
 public:
  Serving(Ranks& r, int self, int peer, absl::Duration wait)
      : thread_([&r, self, peer, wait, this] {
          result_ = r.transports[self]->connect(r.infos[peer], Deadline::after(wait)).status();
        }) {}
  /// Waits for the connect to end and returns how it ended.
  absl::Status result() {
    if (thread_.joinable()) thread_.join();
    return result_;
  }
  ~Serving() { (void)result(); }

 private:
  absl::Status result_;
  std::thread thread_;
};

/// Sends `hello` to `to` and returns the ack it gets (verdict kRejected when none came).
Handshake ack_for(const SockAddr& to, const Handshake& hello) {
  Handshake none;
  none.verdict = kRejected, none.magic = 0;
  const int fd = dial_raw(to);
  if (fd < 0) return none;
  const HelloWire wire = encode_hello(hello);
  if (::send(fd, wire.data(), wire.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(wire.size())) {
    ::close(fd);
    return none;
  }
  const std::string ack = read_raw(fd, kAckBytes, absl::Seconds(3));
  ::close(fd);
  return ack.size() == kAckBytes ? decode_ack(reinterpret_cast<const uint8_t*>(ack.data())) : none;
}

TEST(TcpRailLinks, HellosWithBadRailsAreRefused) {
  const uint64_t job = random_seed();
  Ranks r = make_ranks({"lo", "lo"}, job);  // rank 1 listens on one rail
  ASSERT_EQ(r.transports.size(), 2u);
  const SockAddr listener = addr(r.transports[1]->address().c_str());
  Handshake hello;
  hello.job_id = job, hello.from_rank = 0, hello.to_rank = 1, hello.size = 2;
  Serving serving(r, 1, 0, absl::Seconds(2));
  // Counts are of sockets: two per path, one for each direction's data (tcp/pair.hpp).
  const uint32_t bad[][2] = {{0, 1}, {1, 1}, {0, 0}, {5, 3}, {2, 2},
                             {0, 2 * kMaxRails + 2}, {0, 0xffffffff}, {0xffffffff, 0}};
  for (const auto& [rail, count] : bad) {
    SCOPED_TRACE(absl::StrCat("socket ", rail, " of ", count));
    hello.rail = rail, hello.rail_count = count, hello.nonce = fresh_nonce();
    const Handshake ack = ack_for(listener, hello);
    EXPECT_EQ(ack.magic, kHandshakeMagic) << "no ack";
    EXPECT_EQ(ack.verdict, kRejected);
  }
  hello.rail = 1, hello.rail_count = 2, hello.nonce = fresh_nonce();
  const Handshake good = ack_for(listener, hello);  // acked, then dropped without a proof
  EXPECT_EQ(good.verdict, kAccepted);
  EXPECT_EQ(good.rail, 1u);
  EXPECT_EQ(good.rail_count, 2u);
  EXPECT_EQ(serving.result().code(), absl::StatusCode::kDeadlineExceeded) << serving.result();
  // The real ranks still connect.
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, a, b));
  const size_t bytes[2] = {1000, 1000};
  EXPECT_TRUE(exchange(*a, *b, bytes, 1));
}

/// Dials `to` by hand as socket hello.rail of a link, with a fresh nonce and the right proof;
/// the socket, or -1 when the listener did not ack.
int dial_with_proof(const SockAddr& to, Handshake hello) {
  const int fd = dial_raw(to);
  if (fd < 0) return -1;
  hello.nonce = fresh_nonce();
  const HelloWire wire = encode_hello(hello);
  const std::string ack = ::send(fd, wire.data(), wire.size(), MSG_NOSIGNAL) ==
                                  static_cast<ssize_t>(wire.size())
                              ? read_raw(fd, kAckBytes, absl::Seconds(3))
                              : std::string();
  if (ack.size() != kAckBytes) {
    ::close(fd);
    return -1;
  }
  AckWire ack_wire{};
  std::memcpy(ack_wire.data(), ack.data(), ack.size());
  const Proof proof = dialer_proof(kSecret, wire, ack_wire);
  if (::send(fd, proof.data(), proof.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(proof.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The listener hands a link out only once every rail has arrived, and refuses rails past the
// count it listens on.
TEST(TcpRailLinks, ALinkWaitsForAllItsRails) {
  WEFT_REQUIRE_RAILS(ns);
  const uint64_t job = random_seed();
  Ranks r = make_ranks({"weftr0,weftr1", "weftr0,weftr1"}, job);
  ASSERT_EQ(r.transports.size(), 2u);
  auto listeners = parse_address_list(r.transports[1]->address());
  ASSERT_TRUE(listeners.ok() && listeners->size() == 2u) << r.transports[1]->address();
  Serving serving(r, 1, 0, absl::Seconds(1));
  Handshake hello;
  hello.job_id = job, hello.from_rank = 0, hello.to_rank = 1, hello.size = 2;
  for (const auto& [rail, count] : std::vector<std::pair<uint32_t, uint32_t>>{{2, 2}, {0, 3}}) {
    // Socket 2 of 2 does not exist; 3 is not two sockets a path.
    hello.rail = rail, hello.rail_count = count, hello.nonce = fresh_nonce();
    EXPECT_EQ(ack_for((*listeners)[0], hello).verdict, kRejected) << rail << " of " << count;
  }
  // Socket 1 of 2, by hand and with the right proof; socket 0 never comes.
  hello.rail = 1, hello.rail_count = 2;
  const int fd = dial_with_proof((*listeners)[1], hello);
  ASSERT_GE(fd, 0);
  const absl::Status link = serving.result();
  ASSERT_EQ(link.code(), absl::StatusCode::kDeadlineExceeded) << link;
  EXPECT_NE(link.message().find("1 of the link's 2 sockets arrived"), absl::string_view::npos)
      << link;
  ::close(fd);
  // The real rank 0 dials both rails; its rail 1 replaces the hand-made one.
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, a, b));
  EXPECT_EQ(rails_of(b), 2u);
  const size_t bytes[2] = {3 * kStripeBytes, 3 * kStripeBytes};
  EXPECT_TRUE(exchange(*a, *b, bytes, 2));
}

// A rail that drops every packet when the link is made (a partition): one path past the
// first whole one, both ends start without it and say why, and the link carries a stream
// over the rail left. A socket of that path arriving later is closed, so that a dialer that
// counted it sees it fail.
TEST(TcpRailLinks, ALinkStartsWithoutARailThatCannotConnect) {
  WEFT_REQUIRE_RAILS(ns);
  if (!ns.drop_tcp_to("198.18.1.1")) GTEST_SKIP() << "iptables cannot drop packets here";
  const uint64_t job = random_seed();
  const int path_timeout_ms = 500;
  Ranks r = make_ranks({"weftr0,weftr1", "weftr0,weftr1"}, job, path_timeout_ms);
  ASSERT_EQ(r.transports.size(), 2u);
  const weft::testing::Stopwatch start;
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, a, b, absl::Seconds(10)));
  EXPECT_GE(start.elapsed(), absl::Milliseconds(path_timeout_ms));
  for (const auto* p : {&a, &b}) {
    ASSERT_EQ(rails_of(*p), 2u);
    const auto paths = (*p)->paths();
    EXPECT_TRUE(paths[0].alive);
    EXPECT_FALSE(paths[1].alive);
    EXPECT_NE(paths[1].failure.find("did not connect within 500 ms"), std::string::npos)
        << paths[1].failure;
  }
  const size_t bytes[2] = {3 * kStripeBytes + 7, 2 * kStripeBytes};
  EXPECT_TRUE(exchange(*a, *b, bytes, random_seed()));
  // Socket 1 (rail 1's data) of the same link, late, by hand over rail 0.
  auto listeners = parse_address_list(r.transports[1]->address());
  ASSERT_TRUE(listeners.ok() && listeners->size() == 2u) << r.transports[1]->address();
  Serving serving(r, 1, 0, absl::Seconds(2));  // listeners answer while a connect runs
  Handshake hello;
  hello.job_id = job, hello.from_rank = 0, hello.to_rank = 1, hello.size = 2;
  hello.rail = 1, hello.rail_count = 4;
  const int fd = dial_with_proof((*listeners)[0], hello);
  ASSERT_GE(fd, 0);
  char byte;
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 3000), 1) << "the late socket was not closed";
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);
  ::close(fd);
}

// Handshakes of other versions have other lengths; the listener answers one as soon as its
// version is in, rather than waiting for bytes that never come.
TEST(TcpRailLinks, AnOlderHandshakeIsRefusedAtOnce) {
  Ranks r = make_ranks({"lo", "lo"});
  ASSERT_EQ(r.transports.size(), 2u);
  Serving serving(r, 1, 0, absl::Milliseconds(1500));
  const int fd = dial_raw(addr(r.transports[1]->address().c_str()));
  ASSERT_GE(fd, 0);
  Handshake old;
  old.version = kHandshakeVersion - 1, old.job_id = 1, old.from_rank = 0, old.to_rank = 1;
  const HelloWire wire = encode_hello(old);
  const size_t v2_hello_bytes = 48;  // a version 2 hello: 32-byte header and the nonce
  ASSERT_EQ(::send(fd, wire.data(), v2_hello_bytes, MSG_NOSIGNAL), ssize_t(v2_hello_bytes));
  const weft::testing::Stopwatch start;
  const std::string ack = read_raw(fd, kAckBytes, absl::Seconds(5));
  EXPECT_LT(start.elapsed(), absl::Seconds(1)) << "answered only at the hello timeout";
  ::close(fd);
  ASSERT_GE(ack.size(), 8u);
  const Handshake h = decode_ack(reinterpret_cast<const uint8_t*>(
      (ack + std::string(kAckBytes - ack.size(), '\0')).data()));
  EXPECT_EQ(h.version, kHandshakeVersion);
  EXPECT_EQ(h.verdict, kRejected);
}

}  // namespace
}  // namespace weft::transport::tcp
