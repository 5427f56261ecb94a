// What only the tcp transport has: a listener that strangers can reach (they must neither block
// nor join a job), the job-secret handshake, addresses and interfaces. transport_test.cc runs
// the conformance suite over tcp too.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/base/refusal_log.hpp"
#include "tests/unit/raw_socket.hpp"
#include "tests/unit/stopwatch.hpp"
#include "tests/unit/transport_harness.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/frame.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/liveness.hpp"
#include "transport/tcp/pair.hpp"
#include "transport/tcp/tcp_info.hpp"

namespace weft::transport {
namespace {

const TransportCase kTcp{"tcp", "tcp", &tcp::make_transport};
using tcp::closed_within;
using tcp::dial_raw;
using tcp::read_raw;

// Once the links are up no connect() runs, yet strangers must still be accepted and refused
// (they used to wait in the kernel's backlog for ever), and a flood of them must cost the
// log a few lines and a summary, not a line each (it used to be one line per stranger).
TEST(TcpTransport, StrangersAfterTheLinksAreUpAreRefusedInAFewLines) {
  constexpr int kStrangers = 200;
  ::testing::internal::CaptureStderr();
  int still_open = 0;
  {
    Ranks r = make_ranks(kTcp, 2);
    ASSERT_EQ(r.transports.size(), 2u);
    std::unique_ptr<Pair> p01, p10;
    ASSERT_TRUE(connect_pair(r, 0, 1, p01, p10));
    const std::string junk(100, '\xab');
    std::vector<int> strangers;
    for (int i = 0; i < kStrangers; ++i) {
      const int fd = dial_raw(r.transports[1]->address());
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), ssize_t(junk.size()));
      strangers.push_back(fd);
    }
    const Deadline answered = Deadline::after(absl::Seconds(5));  // for all of them together
    for (int fd : strangers) {
      still_open += !closed_within(fd, std::max(answered.remaining(), absl::ZeroDuration()));
      ::close(fd);
    }
  }  // the transports close: what is left unreported is summarised
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(still_open, 0) << "strangers left unanswered after the links were up";
  const auto lines = std::count(err.begin(), err.end(), '\n');
  EXPECT_LE(lines, RefusalLog::kFullLines + 2) << err;
  EXPECT_NE(err.find(absl::StrCat("refused ", kStrangers - RefusalLog::kFullLines,
                                  " connections")), std::string::npos) << err;
  EXPECT_NE(err.find("not a weft hello"), std::string::npos) << err;
}

// Liveness queries (tcp/liveness.hpp), as a rank whose call failed asks them: a live rank's
// listener answers from its own thread with what the rank concluded, a destroyed one refuses,
// a socket that accepts but never answers is silent, and an answer without the job's secret
// does not count as alive.
TEST(TcpTransport, LivenessQueriesTellAliveSilentAndGone) {
  const uint64_t job = random_seed();
  std::atomic<uint64_t> blame{tcp::Blame{tcp::Blame::kStopped, 5}.pack()};
  std::vector<std::unique_ptr<Transport>> ranks;
  for (int rank : {0, 1, 2}) {
    TransportInit init;
    init.rank = rank, init.size = 6, init.job_id = job, init.secret = kTestSecret;
    if (rank == 1) init.blame = &blame;
    if (rank == 2) init.secret = fresh_secret();  // a stranger holding rank 2's port
    ranks.push_back(*tcp::make_transport(init));
  }
  std::string gone;
  {
    TransportInit init;
    init.rank = 3, init.size = 6, init.job_id = job, init.secret = kTestSecret;
    auto t = tcp::make_transport(init);
    ASSERT_TRUE(t.ok());
    gone = (*t)->address();
  }  // destroyed: its port refuses
  // Accepts (the kernel completes the connection) but never answers: a stopped process.
  const int mute = ::socket(AF_INET, SOCK_STREAM, 0);
  tcp::SockAddr any = *tcp::make_sockaddr("127.0.0.1", 0);
  ASSERT_EQ(::bind(mute, any.get(), any.len), 0);
  ASSERT_EQ(::listen(mute, 4), 0);
  any.len = sizeof any.storage;
  ASSERT_EQ(::getsockname(mute, any.get(), &any.len), 0);

  TransportInit asking;
  asking.rank = 0, asking.size = 6, asking.job_id = job, asking.secret = kTestSecret;
  const weft::testing::Stopwatch start;
  const auto answers = tcp::ask_alive(
      asking, {{1, ranks[1]->address()}, {2, ranks[2]->address()}, {3, gone},
               {4, tcp::format_address(any)}},
      absl::Milliseconds(500));
  ::close(mute);
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_EQ(answers[0].outcome, tcp::PeerAnswer::kAlive) << answers[0].detail;
  EXPECT_EQ(answers[0].blame.kind, tcp::Blame::kStopped);
  EXPECT_EQ(answers[0].blame.rank, 5);
  EXPECT_EQ(answers[1].outcome, tcp::PeerAnswer::kGone) << "an answer without the secret";
  EXPECT_EQ(answers[2].outcome, tcp::PeerAnswer::kGone) << answers[2].detail;
  EXPECT_EQ(answers[3].outcome, tcp::PeerAnswer::kSilent) << answers[3].detail;
  EXPECT_LE(start.elapsed(), absl::Seconds(2));
}

TEST(TcpTransport, StrangersDoNotBlockRealPeers) {
  const uint64_t job = random_seed(), other_job = job + 1;
  Ranks r = make_ranks(kTcp, 3, job);
  ASSERT_EQ(r.transports.size(), 3u);
  const std::string listener = r.transports[1]->address();
  const int garbage = dial_raw(listener), silent = dial_raw(listener);
  ASSERT_GE(garbage, 0);
  ASSERT_GE(silent, 0);
  const std::string junk(100, '\xab');
  ASSERT_EQ(::send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL), ssize_t(junk.size()));
  // Rank 0 of another job dials rank 1 from a listener of its own.
  Ranks other = make_ranks(kTcp, 3, other_job);
  ASSERT_EQ(other.transports.size(), 3u);

  std::unique_ptr<Pair> p01, p10, p12, p21;
  absl::Status wrong_job;
  const Deadline deadline = Deadline::after(kConnectTimeout);
  const auto st = on_threads(3, [&](int who) -> absl::Status {
    if (who == 0) {  // rank 1 serves the strangers while it waits for rank 0, then rank 2
      auto p = r.transports[1]->connect(r.infos[0], deadline);
      if (!p.ok()) return p.status();
      p10 = std::move(*p);
      auto q = r.transports[1]->connect(r.infos[2], deadline);
      if (!q.ok()) return q.status();
      p12 = std::move(*q);
      return absl::OkStatus();
    }
    if (who == 1) {
      wrong_job = other.transports[0]->connect(r.infos[1], deadline).status();
      auto p = r.transports[0]->connect(r.infos[1], deadline);
      if (!p.ok()) return p.status();
      p01 = std::move(*p);
      return absl::OkStatus();
    }
    // Rank 2 shows up after the silent stranger's hello time has run out.
    absl::SleepFor(absl::Milliseconds(2300));
    auto p = r.transports[2]->connect(r.infos[1], deadline);
    if (!p.ok()) return p.status();
    p21 = std::move(*p);
    return absl::OkStatus();
  });
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(wrong_job.code(), absl::StatusCode::kFailedPrecondition) << wrong_job;
  // Both job ids are in the message.
  EXPECT_NE(wrong_job.message().find(absl::StrCat(job)), absl::string_view::npos) << wrong_job;
  EXPECT_NE(wrong_job.message().find(absl::StrCat(other_job)), absl::string_view::npos);
  std::printf("[ tcp ] wrong job: %s\n", std::string(wrong_job.message()).c_str());
  EXPECT_TRUE(closed_within(garbage, absl::Seconds(3)));
  EXPECT_TRUE(closed_within(silent, absl::Seconds(3)));
  ::close(garbage);
  ::close(silent);
  exchange(*p01, *p10, 12345, 54321, 7, false);
  exchange(*p12, *p21, 4096, 1, 8, false);
}

// Only a dialer that proves the job secret gets a link: a rank with another secret, a
// stranger that knows the job id (it is not secret) and a replay of a recorded handshake
// are all refused, and the real ranks connect as if nothing had happened.
TEST(TcpTransport, OnlyDialersThatProveTheSecretAreTaken) {
  const uint64_t job = random_seed();
  Ranks r = make_ranks(kTcp, 2, job);
  Ranks impostor = make_ranks(kTcp, 2, job, fresh_secret());
  ASSERT_EQ(r.transports.size(), 2u);
  ASSERT_EQ(impostor.transports.size(), 2u);
  const std::string listener = r.transports[1]->address();
  tcp::Handshake h;
  // A one-rail link is two sockets, data and control (tcp/pair.hpp): this is socket 0.
  h.job_id = job, h.from_rank = 0, h.to_rank = 1, h.size = 2, h.nonce = fresh_nonce();
  h.rail = 0, h.rail_count = 2;
  const tcp::HelloWire hello = tcp::encode_hello(h);
  h.rail = 1, h.nonce = fresh_nonce();
  const tcp::HelloWire hello_back = tcp::encode_hello(h);
  auto send_raw = [](int fd, const void* data, size_t len) {
    return ::send(fd, data, len, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
  };

  std::unique_ptr<Pair> by_hand, p10, p01;
  absl::Status wrong_secret;
  bool stranger_closed = false, replay_closed = false, got_ack = false;
  std::atomic<bool> first_taken{false};
  const Deadline deadline = Deadline::after(kConnectTimeout);
  const auto st = on_threads(2, [&](int who) -> absl::Status {
    if (who == 0) {  // rank 1 serves its listener while it waits for rank 0, twice
      auto p = r.transports[1]->connect(r.infos[0], deadline);
      if (!p.ok()) return p.status();
      by_hand = std::move(*p);
      first_taken = true;
      auto q = r.transports[1]->connect(r.infos[0], deadline);
      if (!q.ok()) return q.status();
      p10 = std::move(*q);
      return absl::OkStatus();
    }
    wrong_secret = impostor.transports[0]->connect(r.infos[1], Deadline::after(absl::Seconds(5))).status();
    // A stranger: a well-formed hello, then a proof it cannot make.
    const int stranger = dial_raw(listener);
    if (stranger < 0) return absl::InternalError("cannot dial");
    send_raw(stranger, hello.data(), hello.size());
    got_ack = read_raw(stranger, tcp::kAckBytes, absl::Seconds(3)).size() == tcp::kAckBytes;
    const Proof guess{};
    send_raw(stranger, guess.data(), guess.size());
    stranger_closed = closed_within(stranger, absl::Seconds(3));
    ::close(stranger);
    // Rank 0 by hand, recorded: hello, ack, proof on each of its two sockets; its link is
    // taken, and the first frame on socket 0 carries a word.
    std::string ack;
    Proof proof{};
    int honest_fds[2] = {-1, -1};
    for (int k = 0; k < 2; ++k) {
      const tcp::HelloWire& mine = k == 0 ? hello : hello_back;
      honest_fds[k] = dial_raw(listener);
      send_raw(honest_fds[k], mine.data(), mine.size());
      const std::string a = read_raw(honest_fds[k], tcp::kAckBytes, absl::Seconds(3));
      if (a.size() != tcp::kAckBytes) return absl::InternalError("no ack for the honest hello");
      tcp::AckWire ack_wire{};
      std::memcpy(ack_wire.data(), a.data(), a.size());
      const Proof p = tcp::dialer_proof(kTestSecret, mine, ack_wire);
      send_raw(honest_fds[k], p.data(), p.size());
      if (k == 0) ack = a, proof = p;
    }
    const int honest = honest_fds[0];
    tcp::Frame frame;
    frame.length = 4;
    std::byte header[tcp::kFrameHeaderBytes];
    tcp::encode_frame(frame, header);
    send_raw(honest, header, sizeof header);
    const char word[] = "hand";
    send_raw(honest, word, 4);
    while (!first_taken && !deadline.expired()) absl::SleepFor(absl::Milliseconds(1));
    // The recording, replayed: the listener's fresh nonce makes the old proof wrong.
    const int replay = dial_raw(listener);
    send_raw(replay, hello.data(), hello.size());
    const std::string new_ack = read_raw(replay, tcp::kAckBytes, absl::Seconds(3));
    if (new_ack == ack) return absl::InternalError("the listener repeated its nonce");
    send_raw(replay, proof.data(), proof.size());
    replay_closed = closed_within(replay, absl::Seconds(3));
    ::close(replay);
    ::close(honest_fds[0]);
    ::close(honest_fds[1]);
    auto p = r.transports[0]->connect(r.infos[1], deadline);
    if (!p.ok()) return p.status();
    p01 = std::move(*p);
    return absl::OkStatus();
  });
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(wrong_secret.code(), absl::StatusCode::kPermissionDenied) << wrong_secret;
  EXPECT_NE(wrong_secret.message().find("job secret"), absl::string_view::npos) << wrong_secret;
  EXPECT_TRUE(got_ack);
  EXPECT_TRUE(stranger_closed) << "a stranger without the secret kept its connection";
  EXPECT_TRUE(replay_closed) << "a replayed handshake was taken";
  // The hand-made rank 0 was a real link: its first bytes arrived.
  std::string seen;
  for (int i = 0; i < 1000 && seen.size() < 4; ++i) {
    auto n = by_hand->recv_some(4 - seen.size(), [&](const std::byte* d, size_t len) {
      seen.append(reinterpret_cast<const char*>(d), len);
    });
    if (!n.ok()) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(seen, "hand");
  exchange(*p01, *p10, 100000, 3, 9, false);
}

TEST(TcpTransport, DataSentBeforeCloseIsDeliveredThenError) {
  Ranks r = make_ranks(kTcp, 2);
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  const auto msg = make_message(3, 100000);
  std::vector<std::byte> got(msg.size());
  ASSERT_TRUE(progress({{b.get(), &msg}}, {}, nullptr).ok());
  b.reset();
  ASSERT_TRUE(progress({}, {{a.get(), &got}}, nullptr).ok());
  EXPECT_EQ(got, msg);
  absl::Status st;
  for (int i = 0; i < 1000 && st.ok(); ++i) {
    st = a->recv_some(10, [](const std::byte*, size_t) {}).status();
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("rank 1"), absl::string_view::npos) << st;
  EXPECT_EQ(a->stats().errors, 1u);
  auto* tcp_pair = dynamic_cast<tcp::TcpPair*>(a.get());
  ASSERT_NE(tcp_pair, nullptr);
  std::printf("[ tcp ] kernel buffers: SO_SNDBUF %d, SO_RCVBUF %d\n", tcp_pair->sndbuf_bytes(),
              tcp_pair->rcvbuf_bytes());
}

// The tcp transport documents connect() as thread-safe: rank 1 connects to rank 0 (it
// accepts) and to rank 2 (it dials) from two threads at once.
TEST(TcpTransport, ConcurrentConnectsOnOneTransport) {
  Ranks r = make_ranks(kTcp, 3);
  ASSERT_EQ(r.transports.size(), 3u);
  std::unique_ptr<Pair> p[4];  // 1->0, 1->2, 0->1, 2->1
  const Deadline deadline = Deadline::after(kConnectTimeout);
  const int self[4] = {1, 1, 0, 2}, peer[4] = {0, 2, 1, 1};
  for (const auto& st : on_threads(4, [&](int i) -> absl::Status {
         auto pair = r.transports[self[i]]->connect(r.infos[peer[i]], deadline);
         if (!pair.ok()) return pair.status();
         p[i] = std::move(*pair);
         return absl::OkStatus();
       })) {
    ASSERT_TRUE(st.ok()) << st;
  }
  exchange(*p[0], *p[2], 3000, 4000, 11, false);
  exchange(*p[1], *p[3], 5000, 6000, 12, false);
}

TEST(TcpTransport, ParsesAndFormatsAddresses) {
  auto v4 = tcp::parse_address("127.0.0.1:8080");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->family(), AF_INET);
  EXPECT_EQ(tcp::format_address(*v4), "127.0.0.1:8080");
  auto v6 = tcp::parse_address("[::1]:9");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->family(), AF_INET6);
  EXPECT_EQ(tcp::format_address(*v6), "[::1]:9");
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000",
                          "localhost:80", "::1:80", "[::1]80", "[::1:80", "1.2.3.4:8x"}) {
    EXPECT_FALSE(tcp::parse_address(bad).ok()) << bad;
  }
}

TEST(TcpTransport, ChoosesListenInterface) {
  auto lo = tcp::choose_listen_ip("lo");
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(*lo, "127.0.0.1");
  auto any = tcp::choose_listen_ip("");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_TRUE(tcp::make_sockaddr(*any, 1).ok()) << *any;
  auto missing = tcp::choose_listen_ip("weftnosuch0");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("weftnosuch0"), absl::string_view::npos);
  TransportInit init;
  init.rank = 0, init.size = 1, init.socket_ifname = "lo";
  auto t = tcp::make_transport(init);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->address().rfind("127.0.0.1:", 0), 0u) << (*t)->address();
  EXPECT_EQ((*t)->name(), "tcp");
}

// TCP_INFO's segment and retransmission totals are 32 bits: carried on across a wrap, they
// keep growing, where a monitor would otherwise take the wrap for a reset.
TEST(SocketTotals, CarryThe32BitTotalsOnAcrossAWrap) {
  tcp::SocketTotals totals;
  tcp::SocketPathInfo info;
  info.segments_sent = 0xffffff00u;
  info.retransmits = 7;
  totals.widen(&info);
  EXPECT_EQ(info.segments_sent, 0xffffff00u);
  info.segments_sent = 0x100;  // wrapped: 0x200 more
  info.retransmits = 9;
  totals.widen(&info);
  EXPECT_EQ(info.segments_sent, 0x100000100u);
  EXPECT_EQ(info.retransmits, 9u);
}

}  // namespace
}  // namespace weft::transport
