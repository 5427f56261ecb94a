// Relay paths (transport/tcp/relay.hpp): a link between ranks 0 and 1 whose every path is cut
// as a partition cuts it (timed out, never closed) carries on over a path through rank 2,
// every byte in order both ways; a link whose peer closed its paths (it exited) still fails
// at once; and when no relay reaches the far end the error says so. A link asked to detour
// (a link health isolated) moves onto such a path while bytes flow, and back. Ranks are
// threads of this process, over loopback. The far end pairs a path's two sockets only when
// they come from one attempt of the dialer's.
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/transport_harness.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/pair.hpp"
#include "transport/tcp/relay.hpp"

namespace weft::transport {
namespace {

constexpr int kPathTimeoutMs = 500;

/// Three tcp ranks that know each other's addresses, as a communicator's do after bootstrap.
Ranks relay_ranks(bool relay_paths = true) {
  Ranks r;
  const uint64_t job = random_seed();
  for (int i = 0; i < 3; ++i) {
    TransportInit init;
    init.rank = i, init.size = 3, init.job_id = job, init.secret = kTestSecret;
    init.path_timeout_ms = kPathTimeoutMs, init.relay_paths = relay_paths;
    auto t = tcp::make_transport(init);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return Ranks{};
    PeerInfo info;
    info.rank = i, info.pid = getpid(), info.host_id = local_host_id();
    info.addresses = {{"tcp", (*t)->address()}};
    r.transports.push_back(std::move(*t));
    r.infos.push_back(std::move(info));
  }
  for (auto& t : r.transports) t->learn_peers(r.infos);
  return r;
}

tcp::TcpPair& tcp_of(const std::unique_ptr<Pair>& p) { return dynamic_cast<tcp::TcpPair&>(*p); }

/// Sends `bytes` each way between a and b, each side on its own thread and checking its
/// link whenever nothing moved, as a rank's waits do; OK once everything arrived intact.
std::vector<absl::Status> exchange(Pair& a, Pair& b, size_t bytes, uint64_t seed,
                                   absl::Duration timeout = absl::Seconds(30)) {
  Pair* pairs[2] = {&a, &b};
  return on_threads(2, [&](int s) -> absl::Status {
    const std::vector<std::byte> msg = make_message(seed + s, bytes);
    std::vector<std::byte> got(bytes);
    const Deadline deadline = Deadline::after(timeout);
    size_t sent = 0, received = 0;
    for (uint64_t round = 0; sent < bytes || received < bytes; ++round) {
      if (deadline.expired() || round > kMaxRounds) return deadline_error("the test's exchange");
      bool moved = false;
      if (sent < bytes) {
        auto n = pairs[s]->send_some(msg.data() + sent, bytes - sent);
        if (!n.ok()) return n.status();
        sent += *n, moved |= *n > 0;
      }
      if (received < bytes) {
        auto n = pairs[s]->recv_some(bytes - received, [&](const std::byte* d, size_t len) {
          std::memcpy(got.data() + received, d, len);
          received += len;
        });
        if (!n.ok()) return n.status();
        moved |= *n > 0;
      }
      if (!moved) {
        if (absl::Status st = pairs[s]->check_peer(); !st.ok()) return st;
        pairs[s]->tend();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    const int64_t bad = first_mismatch(got, seed + 1 - s);
    if (bad >= 0) return absl::DataLossError(absl::StrCat("byte ", bad, " differs"));
    // What this side sent may still wait for its acknowledgement, or be asked for again (a
    // path added under it): tend until the peer has it, as a communicator's tender does.
    while (pairs[s]->tend()) {
      if (deadline.expired()) return deadline_error("the peer's acknowledgement");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return absl::OkStatus();
  });
}

TEST(TcpRelay, ALinkWhosePathsAllTimedOutCarriesOnThroughARelay) {
  Ranks r = relay_ranks();
  ASSERT_EQ(r.transports.size(), 3u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  for (const auto& st : exchange(*a, *b, 1 << 20, 1)) ASSERT_TRUE(st.ok()) << st;
  tcp_of(b).inject_partition();  // both ends first, so neither reads the other's close
  tcp_of(a).inject_partition();
  const auto st = exchange(*a, *b, (3 << 20) + 7, 2);
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  for (const auto* p : {&a, &b}) {
    const auto paths = (*p)->paths();
    ASSERT_EQ(paths.size(), 2u);
    EXPECT_FALSE(paths[0].alive);
    EXPECT_TRUE(paths[1].alive) << paths[1].failure;
    EXPECT_EQ(paths[1].name, "path 1 (relayed)");
    EXPECT_GT(paths[1].bytes_received, 0u);
  }
  // And on again, over the relay alone.
  for (const auto& s : exchange(*a, *b, 1 << 20, 3)) EXPECT_TRUE(s.ok()) << s;
}

TEST(TcpRelay, ALinkWhosePeerClosedItsPathsFailsAtOnce) {
  Ranks r = relay_ranks();
  ASSERT_EQ(r.transports.size(), 3u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  b.reset();  // as rank 1 exiting closes its sockets
  absl::Status failed;
  for (int i = 0; i < 2000 && failed.ok(); ++i) {
    std::byte one{1};
    auto n = a->send_some(&one, 1);
    failed = n.ok() ? a->check_peer() : n.status();
    if (failed.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("has no path left"), std::string::npos) << failed;
  EXPECT_EQ(failed.message().find("through another rank"), std::string::npos)
      << "it waited for a relay: " << failed;
}

TEST(TcpRelay, NoRelayReachingThePeerIsReported) {
  Ranks r = relay_ranks();
  ASSERT_EQ(r.transports.size(), 3u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  tcp_of(a).inject_partition();  // before rank 1 goes, so rank 0 never reads its close
  b.reset();
  r.transports[1].reset();  // rank 1 is gone: the relay finds no one to connect to
  absl::Status failed;
  for (int i = 0; i < 20000 && failed.ok(); ++i) {
    auto n = a->recv_some(1, [](const std::byte*, size_t) {});
    failed = n.ok() ? a->check_peer() : n.status();
    if (failed.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("no path through another rank came"), std::string::npos)
      << failed;
  EXPECT_NE(failed.message().find("relay rank 2"), std::string::npos) << failed;
}

/// What each path of `p` has sent so far, by name.
std::vector<uint64_t> sent_by_path(const Pair& p) {
  std::vector<uint64_t> out;
  for (const auto& path : p.paths()) out.push_back(path.bytes_sent);
  return out;
}

TEST(TcpRelay, ADetourAskedMidStreamByOneEndCarriesTheLinkThroughARelayAndBack) {
  Ranks r = relay_ranks();
  ASSERT_EQ(r.transports.size(), 3u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  for (const auto& st : exchange(*a, *b, 1 << 20, 5)) ASSERT_TRUE(st.ok()) << st;
  // Only the dialer asks, from another thread, while bytes flow both ways: as the health
  // monitor does when rank 0 alone judges the link FAILING in the middle of a call.
  // The path comes within a tick of the acceptor thread (500 ms): flow until it is in.
  absl::Status flowed;
  std::thread flow([&] {
    const Deadline until = Deadline::after(absl::Seconds(10));
    for (int round = 0; round < 10000 && !until.expired() && flowed.ok() && a->paths().size() < 2;
         ++round) {
      for (const auto& s : exchange(*a, *b, 1 << 20, 100 + round)) flowed.Update(s);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  a->detour(true);
  flow.join();
  ASSERT_TRUE(flowed.ok()) << flowed;
  ASSERT_EQ(a->paths().size(), 2u) << "no path was added through rank 2";
  EXPECT_EQ(a->paths()[1].name, "path 1 (relayed)");
  // Detoured: rank 0's bytes go through rank 2 alone, rank 1's still over the rail.
  auto before_a = sent_by_path(*a), before_b = sent_by_path(*b);
  for (const auto& s : exchange(*a, *b, 2 << 20, 7)) ASSERT_TRUE(s.ok()) << s;
  auto after_a = sent_by_path(*a), after_b = sent_by_path(*b);
  EXPECT_EQ(after_a[0], before_a[0]) << "the detoured end still sent over its rail";
  EXPECT_GE(after_a[1] - before_a[1], 2u << 20);
  EXPECT_GE(after_b[0] - before_b[0], 2u << 20) << "the end that was not told moved off";
  // Both told (a call adopting the isolation), then back: the rail again, nothing relayed,
  // and neither receiver waits on the path its sender left.
  b->detour(true);
  for (const auto& s : exchange(*a, *b, 2 << 20, 8)) ASSERT_TRUE(s.ok()) << s;
  a->detour(false);
  b->detour(false);
  for (const auto& s : exchange(*a, *b, (1 << 20) + 3, 9)) ASSERT_TRUE(s.ok()) << s;
  before_a = sent_by_path(*a), before_b = sent_by_path(*b);
  for (const auto& s : exchange(*a, *b, 2 << 20, 10)) ASSERT_TRUE(s.ok()) << s;
  after_a = sent_by_path(*a), after_b = sent_by_path(*b);
  for (const auto* v : {&before_a, &after_a, &before_b, &after_b}) ASSERT_EQ(v->size(), 2u);
  EXPECT_EQ(after_a[1], before_a[1]) << "the relay still carries rank 0's bytes";
  EXPECT_EQ(after_b[1], before_b[1]) << "the relay still carries rank 1's bytes";
  EXPECT_GE(after_a[0] - before_a[0], 2u << 20);
  EXPECT_GE(after_b[0] - before_b[0], 2u << 20);
}

TEST(TcpRelay, ADetourAskedByTheAcceptingEndAloneKeepsTheRail) {
  Ranks r = relay_ranks();
  ASSERT_EQ(r.transports.size(), 3u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  b->detour(true);  // the dialer makes added paths; rank 1 has none to move to
  for (const auto& st : exchange(*a, *b, 4 << 20, 11)) ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(b->paths().size(), 1u);
}

TEST(TcpRelay, OffMeansTheLinkFailsAsBefore) {
  Ranks r = relay_ranks(/*relay_paths=*/false);
  ASSERT_EQ(r.transports.size(), 3u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  tcp_of(b).inject_partition();
  tcp_of(a).inject_partition();
  const auto st = exchange(*a, *b, 1 << 20, 4, absl::Seconds(5));
  EXPECT_NE(st[0].message().find("has no path left"), std::string::npos) << st[0];
}

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// An attempt that failed after its data socket reached the far end leaves that socket
// there; the next attempt's sockets pair with each other, never with it, and a socket of an
// attempt given up that arrives late is closed. (Paired across attempts, the ends once ran a
// path over sockets the other end never read, and a call waited out its deadline.)
TEST(TcpRelay, APathPairsOnlySocketsOfOneAttempt) {
  tcp::PathIntake intake(/*peer=*/0);
  int fds[5];
  for (int& fd : fds) fd = ::dup(STDERR_FILENO);
  intake.offer(0, /*attempt=*/3, fds[0], "rank 2");  // attempt 3 failed after this one
  EXPECT_FALSE(intake.ready());
  intake.offer(1, /*attempt=*/4, fds[1], "rank 3");
  EXPECT_FALSE(intake.ready()) << "paired attempt 4's control with attempt 3's data";
  EXPECT_FALSE(is_open(fds[0])) << "attempt 3's unpaired socket stays open";
  intake.offer(1, /*attempt=*/3, fds[2], "rank 2");  // late, from the attempt given up
  EXPECT_FALSE(is_open(fds[2]));
  EXPECT_FALSE(intake.ready());
  intake.offer(0, /*attempt=*/4, fds[3], "rank 3");
  ASSERT_TRUE(intake.ready());
  auto path = intake.take();
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(path->data, fds[3]);
  EXPECT_EQ(path->control, fds[1]);
  EXPECT_EQ(path->attempt, 4u);
  EXPECT_EQ(path->via, "rank 3");
  EXPECT_FALSE(intake.ready());
  ::close(path->data);
  ::close(path->control);
  intake.offer(0, /*attempt=*/2, fds[4], "rank 2");  // older than the path just taken
  EXPECT_FALSE(is_open(fds[4]));
  EXPECT_FALSE(intake.take().has_value());
}

}  // namespace
}  // namespace weft::transport
