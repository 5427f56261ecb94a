// Transport conformance suite: written once, instantiated per transport. Every "rank" is a
// Transport object in this process, driven from its own thread as a real rank would drive
// its links. Every loop is bounded by a deadline and an iteration count, so a broken
// transport fails the test instead of hanging it.
//
// The suite also runs over tcp with two rails (tcp_2rails: every link stripes over two
// sockets), in a network namespace of its own (rail_namespace.hpp); it is skipped where that
// cannot be made (not root). The tcp-only tests at the end cover what only a socket listener
// has: strangers. tcp_rails_test.cc tests rails on their own.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/deadline.hpp"
#include "src/peer_info.hpp"
#include "transport/shm/context.hpp"
#include "transport/shm/ring.hpp"
#include "transport/shm/stale.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/context.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/pair.hpp"
#include "transport/transport.hpp"
#include "tests/unit/rail_namespace.hpp"

namespace weft::transport {
namespace {

using MakeTransport = std::function<absl::StatusOr<std::unique_ptr<Transport>>(const TransportInit&)>;

/// One instantiation of the suite: its name, the transport's name and its factory.
struct TransportCase {
  const char* name;
  const char* transport;  ///< what the ranks publish their address under
  MakeTransport make;
  /// Whether the lower rank's connect waits for the peer (tcp waits for the ack). shm's lower
  /// rank creates both rings and returns at once, so that connects in any order cannot wait
  /// on each other in a cycle; a peer that never comes then shows at the first wait on data.
  bool lower_rank_waits = true;
  /// Whether the case runs in a RailNamespace (the ranks' rails are there).
  bool needs_rails = false;
};
void PrintTo(const TransportCase& c, std::ostream* os) { *os << c.name; }

constexpr absl::Duration kConnectTimeout = absl::Seconds(20);
constexpr absl::Duration kTransferTimeout = absl::Seconds(60);
constexpr uint64_t kMaxRounds = uint64_t{1} << 28;  // progress loop bound besides the deadline

uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

/// N ranks of one communicator living in this process.
struct Ranks {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<PeerInfo> infos;
};

// The job secret of the ranks in these tests, unless a test gives another.
const JobSecret kTestSecret = fresh_secret();

Ranks make_ranks(const TransportCase& c, int n, uint64_t job_id = random_seed(),
                 const JobSecret& secret = kTestSecret) {
  Ranks r;
  for (int i = 0; i < n; ++i) {
    TransportInit init;
    init.rank = i, init.size = n, init.job_id = job_id, init.secret = secret;
    init.single_copy_bytes = 4096;  // small, so that offers meet every path
    auto t = c.make(init);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return Ranks{};
    PeerInfo info;
    info.rank = i, info.pid = getpid(), info.host_id = local_host_id();
    info.addresses = {{c.transport, (*t)->address()}};
    r.transports.push_back(std::move(*t));
    r.infos.push_back(std::move(info));
  }
  return r;
}

/// Runs body(rank) for ranks 0..n-1 on their own threads and returns their statuses.
std::vector<absl::Status> on_threads(int n, const std::function<absl::Status(int)>& body) {
  std::vector<absl::Status> out(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { out[i] = body(i); });
  for (auto& t : threads) t.join();
  return out;
}

/// Connects ranks a and b, each from its own thread (connect blocks until both call it).
bool connect_pair(Ranks& r, int a, int b, std::unique_ptr<Pair>& pa, std::unique_ptr<Pair>& pb) {
  const Deadline deadline = Deadline::after(kConnectTimeout);
  const auto st = on_threads(2, [&](int side) -> absl::Status {
    auto p = side == 0 ? r.transports[a]->connect(r.infos[b], deadline)
                       : r.transports[b]->connect(r.infos[a], deadline);
    if (!p.ok()) return p.status();
    (side == 0 ? pa : pb) = std::move(*p);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  return pa != nullptr && pb != nullptr;
}

/// A position-dependent byte: a dropped, repeated or reordered byte changes what follows.
std::byte pattern(uint64_t seed, uint64_t i) {
  return static_cast<std::byte>(((i + seed) * 0x9E3779B97F4A7C15ull) >> 56);
}
std::vector<std::byte> make_message(uint64_t seed, size_t n) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(seed, i);
  return v;
}
/// Index of the first byte that differs from the pattern, or -1.
int64_t first_mismatch(const std::vector<std::byte>& v, uint64_t seed) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != pattern(seed, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

struct Outgoing {
  Pair* pair;
  const std::vector<std::byte>* data;
  size_t done = 0;
};

/// How a progress loop drives its links: send_some and recv_some, or offer_some (the peer may
/// read straight from the sender's buffer) with recv_into and recv_some taking turns.
enum class Calls { kCopy, kOffer };
struct Incoming {
  Pair* pair;
  std::vector<std::byte>* out;  // sized to the expected message
  size_t done = 0;
};

/// One rank's progress loop: alternates send_some and recv_some on all its links until
/// every message is through. `rng` (optional) randomises slice sizes and receive limits.
absl::Status progress(std::vector<Outgoing> sends, std::vector<Incoming> recvs,
                      std::mt19937_64* rng, Calls calls = Calls::kCopy) {
  const Deadline deadline = Deadline::after(kTransferTimeout);
  auto pick = [&](size_t left) -> size_t {
    if (rng == nullptr || left == 0) return left;
    static constexpr size_t kCaps[] = {1, 7, 4096, 65536, 1 << 20};
    const size_t cap = kCaps[(*rng)() % 5];
    return std::min(left, 1 + (*rng)() % cap);
  };
  Backoff backoff;
  for (uint64_t round = 0; round < kMaxRounds; ++round) {
    bool moved = false, finished = true;
    for (Outgoing& s : sends) {
      if (s.done == s.data->size()) continue;
      const std::byte* from = s.data->data() + s.done;
      const size_t len = pick(s.data->size() - s.done);
      auto n = calls == Calls::kOffer ? s.pair->offer_some(from, len) : s.pair->send_some(from, len);
      if (!n.ok()) return n.status();
      s.done += *n, moved |= *n > 0, finished = false;
    }
    for (Incoming& r : recvs) {
      if (r.done == r.out->size()) continue;
      if (calls == Calls::kOffer && (rng == nullptr || (*rng)() % 2 == 0)) {
        auto n = r.pair->recv_into(r.out->data() + r.done, pick(r.out->size() - r.done));
        if (!n.ok()) return n.status();
        r.done += *n;
        if (r.done > r.out->size()) return absl::InternalError("recv_into took more than max");
        moved |= *n > 0, finished = false;
        continue;
      }
      auto n = r.pair->recv_some(pick(r.out->size() - r.done), [&](const std::byte* d, size_t len) {
        const size_t room = r.out->size() - r.done;
        std::memcpy(r.out->data() + r.done, d, std::min(len, room));
        r.done += len;  // overrun shows as done > size below
      });
      if (!n.ok()) return n.status();
      if (r.done > r.out->size()) return absl::InternalError("recv_some handed over more than max");
      moved |= *n > 0, finished = false;
    }
    if (finished) return absl::OkStatus();
    if (moved) {
      backoff.reset();
    } else {
      if (deadline.expired()) return deadline_error("the test's messages");
      backoff.pause();
    }
  }
  return absl::InternalError("progress loop ran out of rounds");
}

/// Both ranks of a link send `a_bytes` / `b_bytes` to each other at the same time and check
/// what arrives. Returns the seconds the exchange took.
double exchange(Pair& a, Pair& b, size_t a_bytes, size_t b_bytes, uint64_t seed, bool random,
                Calls calls = Calls::kCopy) {
  const auto a_msg = make_message(seed, a_bytes), b_msg = make_message(seed + 1, b_bytes);
  std::vector<std::byte> at_b(a_bytes), at_a(b_bytes);  // zero-filled: pages already faulted in
  const absl::Time start = absl::Now();
  const auto st = on_threads(2, [&](int side) {
    std::mt19937_64 rng(seed + side);
    if (side == 0) return progress({{&a, &a_msg}}, {{&a, &at_a}}, random ? &rng : nullptr, calls);
    return progress({{&b, &b_msg}}, {{&b, &at_b}}, random ? &rng : nullptr, calls);
  });
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  EXPECT_EQ(first_mismatch(at_b, seed), -1) << a_bytes << " bytes from rank " << a.peer();
  EXPECT_EQ(first_mismatch(at_a, seed + 1), -1) << b_bytes << " bytes from rank " << b.peer();
  return seconds;
}

size_t drain(Pair& p) {
  auto n = p.recv_some(1 << 20, [](const std::byte*, size_t) {});
  return n.ok() ? *n : 0;
}

class TransportTest : public ::testing::TestWithParam<TransportCase> {
 protected:
  void SetUp() override {
    if (!GetParam().needs_rails) return;
    rails_.emplace();
    if (!rails_->why_not().empty()) GTEST_SKIP() << "no rails for this test: " << rails_->why_not();
  }
  std::optional<weft::testing::RailNamespace> rails_;  // destroyed after the test body's ranks
};

/// tcp over the two rails of a RailNamespace: every link stripes over two sockets.
absl::StatusOr<std::unique_ptr<Transport>> make_two_rail_tcp(const TransportInit& init) {
  TransportInit two = init;
  two.socket_ifname = "weftr0,weftr1";
  return tcp::make_transport(two);
}

TEST_P(TransportTest, MovesMessagesBothWaysAtOnce) {
  Ranks r = make_ranks(GetParam(), 2);
  ASSERT_EQ(r.transports.size(), 2u);
  EXPECT_TRUE(r.transports[0]->viable(r.infos[0], r.infos[1]));
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  EXPECT_EQ(a->peer(), 1);
  EXPECT_EQ(b->peer(), 0);
  uint64_t total = 0;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{(1 << 20) + 3},
                       size_t{64} << 20}) {
    SCOPED_TRACE(bytes);
    const double s = exchange(*a, *b, bytes, bytes, bytes, /*random=*/false);
    total += bytes;
    if (bytes == size_t{64} << 20) {
      std::printf("[ %s ] 64 MiB both ways at once: %.0f MB/s each way\n", GetParam().name,
                  bytes / s / 1e6);
    }
  }
  const size_t big = size_t{64} << 20;
  const double one_way = exchange(*a, *b, big, 0, 99, false);
  std::printf("[ %s ] 64 MiB one way: %.0f MB/s\n", GetParam().name, big / one_way / 1e6);
  total += big;
  EXPECT_EQ(drain(*a), 0u);
  EXPECT_EQ(drain(*b), 0u);
  EXPECT_EQ(a->stats().bytes_sent, total);
  EXPECT_EQ(b->stats().bytes_received, total);
  EXPECT_EQ(a->stats().errors, 0u);
  if (GetParam().needs_rails) {  // the link really striped
    auto* striped = dynamic_cast<tcp::TcpPair*>(a.get());
    ASSERT_NE(striped, nullptr);
    ASSERT_EQ(striped->rails(), 2u);
    EXPECT_GT(striped->rail_stats(0).bytes_sent, total / 3);
    EXPECT_GT(striped->rail_stats(1).bytes_sent, total / 3);
  }
}

TEST_P(TransportTest, RandomSlicesAndReceiveLimits) {
  const uint64_t seed = random_seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  Ranks r = make_ranks(GetParam(), 2);
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  for (int i = 0; i < 12; ++i) {
    const size_t a_bytes = rng() % (3 << 20), b_bytes = rng() % 5000;
    exchange(*a, *b, a_bytes, i % 2 ? b_bytes : a_bytes, seed + 2 * i, /*random=*/true);
  }
}

// offer_some lets shm's receiver copy straight from the sender's buffer; whichever receive
// call takes the bytes (recv_into at any alignment, or recv_some), they arrive intact.
TEST_P(TransportTest, OffersArriveWhicheverWayTheyAreReceived) {
  const uint64_t seed = random_seed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::mt19937_64 rng(seed);
  Ranks r = make_ranks(GetParam(), 2);
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  // A receiver first checks that it may read its sender's memory; before that, offers are
  // plain copies.
  exchange(*a, *b, 1, 1, seed, /*random=*/false);
  exchange(*a, *b, (8 << 20) + 3, (5 << 20) + 1, seed + 1, /*random=*/false, Calls::kOffer);
  for (int i = 0; i < 12; ++i) {
    const size_t a_bytes = rng() % (3 << 20), b_bytes = rng() % (1 << 20);
    exchange(*a, *b, a_bytes, b_bytes, seed + 2 * i + 2, /*random=*/true, Calls::kOffer);
  }
  EXPECT_EQ(drain(*a), 0u);
  EXPECT_EQ(drain(*b), 0u);
  EXPECT_EQ(a->stats().errors + b->stats().errors, 0u);
  if (std::string_view(GetParam().name) == "shm") {
    EXPECT_GT(a->stats().bytes_sent_single_copy, uint64_t{8} << 20);
    EXPECT_GT(b->stats().bytes_sent_single_copy, uint64_t{5} << 20);
  } else {
    EXPECT_EQ(a->stats().bytes_sent_single_copy, 0u);
  }
}

TEST_P(TransportTest, FourRanksConnectAllPairsInShuffledOrder) {
  constexpr int kRanks = 4;
  for (int round = 0; round < 3; ++round) {
    const uint64_t seed = random_seed();
    SCOPED_TRACE(absl::StrCat("round ", round, " seed ", seed));
    Ranks r = make_ranks(GetParam(), kRanks);
    ASSERT_EQ(r.transports.size(), size_t{kRanks});
    std::unique_ptr<Pair> pairs[kRanks][kRanks];
    const Deadline deadline = Deadline::after(kConnectTimeout);
    for (const absl::Status& st : on_threads(kRanks, [&](int self) {
           std::vector<int> order;
           for (int p = 0; p < kRanks; ++p) if (p != self) order.push_back(p);
           std::mt19937_64 rng(seed + self);
           std::shuffle(order.begin(), order.end(), rng);
           for (int p : order) {
             auto pair = r.transports[self]->connect(r.infos[p], deadline);
             if (!pair.ok()) return pair.status();
             pairs[self][p] = std::move(*pair);
           }
           return absl::OkStatus();
         })) {
      ASSERT_TRUE(st.ok()) << st;
    }
    // Every rank sends a distinct message to every other rank, all links at once.
    std::vector<std::byte> sent[kRanks][kRanks], got[kRanks][kRanks];
    for (int i = 0; i < kRanks; ++i) {
      for (int j = 0; j < kRanks; ++j) {
        if (i == j) continue;
        EXPECT_EQ(pairs[i][j]->peer(), j);
        sent[i][j] = make_message(seed + 10 * i + j, 100000 + 1000 * i + j);
        got[j][i].resize(sent[i][j].size());
      }
    }
    for (const absl::Status& st : on_threads(kRanks, [&](int self) {
           std::vector<Outgoing> sends;
           std::vector<Incoming> recvs;
           for (int p = 0; p < kRanks; ++p) {
             if (p == self) continue;
             sends.push_back({pairs[self][p].get(), &sent[self][p]});
             recvs.push_back({pairs[self][p].get(), &got[self][p]});
           }
           return progress(sends, recvs, nullptr);
         })) {
      EXPECT_TRUE(st.ok()) << st;
    }
    for (int i = 0; i < kRanks; ++i) {
      for (int j = 0; j < kRanks; ++j) {
        if (i == j) continue;
        EXPECT_EQ(got[j][i], sent[i][j]) << "from rank " << i << " to rank " << j;
      }
    }
  }
}

TEST_P(TransportTest, ConnectTimesOutWhenPeerNeverConnects) {
  const absl::Duration timeout = absl::Milliseconds(500);
  for (int self : {0, 1}) {  // the lower and the higher rank may play different roles
    SCOPED_TRACE(absl::StrCat("rank ", self, " connects alone"));
    Ranks r = make_ranks(GetParam(), 2);
    ASSERT_EQ(r.transports.size(), 2u);
    const absl::Time start = absl::Now();
    auto p = r.transports[self]->connect(r.infos[1 - self], Deadline::after(timeout));
    const absl::Duration elapsed = absl::Now() - start;
    if (self == 0 && !GetParam().lower_rank_waits) {
      EXPECT_TRUE(p.ok()) << p.status();
      EXPECT_LE(elapsed, absl::Seconds(1));
      continue;
    }
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kDeadlineExceeded) << p.status();
    EXPECT_GE(elapsed, timeout - absl::Milliseconds(20));
    EXPECT_LE(elapsed, timeout + absl::Seconds(1));
    std::printf("[ %s ] %s\n", GetParam().name, std::string(p.status().message()).c_str());
  }
}

TEST_P(TransportTest, ConnectFailsInTimeWhenPeerIsGone) {
  const absl::Duration timeout = absl::Milliseconds(500);
  for (int self : {0, 1}) {
    Ranks r = make_ranks(GetParam(), 2);
    ASSERT_EQ(r.transports.size(), 2u);
    r.transports[1 - self].reset();
    const absl::Time start = absl::Now();
    auto p = r.transports[self]->connect(r.infos[1 - self], Deadline::after(timeout));
    // (A shm creator cannot tell a destroyed transport in a live process from a late one.)
    if (self == 1 || GetParam().lower_rank_waits) {
      EXPECT_FALSE(p.ok());
    }
    EXPECT_LE(absl::Now() - start, timeout + absl::Seconds(1));
  }
}

TEST_P(TransportTest, ConnectRejectsItselfAndUnknownRanks) {
  Ranks r = make_ranks(GetParam(), 2);
  ASSERT_EQ(r.transports.size(), 2u);
  PeerInfo stranger = r.infos[1];
  stranger.rank = 7;
  EXPECT_FALSE(r.transports[0]->connect(r.infos[0], Deadline::after(absl::Seconds(1))).ok());
  EXPECT_FALSE(r.transports[0]->connect(stranger, Deadline::after(absl::Seconds(1))).ok());
}

// A peer that goes away must surface as an error within a bounded time, never a hang.
TEST_P(TransportTest, PeerGoneIsReportedNotHung) {
  for (bool whole_rank : {false, true}) {
    SCOPED_TRACE(whole_rank ? "transport destroyed" : "pair destroyed");
    Ranks r = make_ranks(GetParam(), 2);
    ASSERT_EQ(r.transports.size(), 2u);
    std::unique_ptr<Pair> a, b;
    ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
    exchange(*a, *b, 1000, 1000, 5, false);
    b.reset();
    if (whole_rank) r.transports[1].reset();
    const Deadline deadline = Deadline::after(absl::Seconds(5));
    const std::byte byte{42};
    absl::Status seen;
    for (int i = 0; i < 100000 && seen.ok() && !deadline.expired(); ++i) {
      auto n = a->recv_some(4096, [](const std::byte*, size_t) {});
      if (!n.ok()) seen = n.status();
      if (seen.ok()) seen = a->check_peer();
      if (seen.ok() && i % 2 == 1) seen = a->send_some(&byte, 1).status();
      if (seen.ok()) absl::SleepFor(absl::Microseconds(50));
    }
    EXPECT_FALSE(seen.ok()) << "the surviving rank never noticed its peer was gone";
    std::printf("[ %s ] %s\n", GetParam().name, std::string(seen.message()).c_str());
    // Once broken, a link stays broken.
    EXPECT_FALSE(a->check_peer().ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest,
                         ::testing::Values(TransportCase{"shm", "shm", &shm::make_transport, false},
                                           TransportCase{"tcp", "tcp", &tcp::make_transport},
                                           TransportCase{"tcp_2rails", "tcp", &make_two_rail_tcp,
                                                         true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- shm only ----

const TransportCase kShm{"shm", "shm", &shm::make_transport, false};

// While the peer may still be reading an offer, the sender's buffer is the peer's to read: a
// send that resumes anywhere else is a caller's bug and fails instead of corrupting the stream.
TEST(ShmTransport, AnOfferResumesOnlyWhereItLeftOff) {
  Ranks r = make_ranks(kShm, 2);
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  EXPECT_EQ(drain(*b), 0u);  // b checks that it may read a's memory
  const std::vector<std::byte> x = make_message(7, 1 << 20), y = make_message(8, 1 << 20);
  auto posted = a->offer_some(x.data(), x.size());
  ASSERT_TRUE(posted.ok()) << posted.status();
  EXPECT_EQ(*posted, 0u) << "an offer counts as taken only once the peer has read it";
  auto elsewhere = a->offer_some(y.data(), y.size());
  EXPECT_EQ(elsewhere.status().code(), absl::StatusCode::kInternal) << elsewhere.status();

  std::vector<std::byte> got(x.size());
  size_t done = 0;
  for (int i = 0; i < 1000 && done < got.size(); ++i) {
    auto n = b->recv_into(got.data() + done, got.size() - done);
    ASSERT_TRUE(n.ok()) << n.status();
    done += *n;
  }
  EXPECT_EQ(first_mismatch(got, 7), -1);
  auto taken = a->offer_some(x.data(), x.size());
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, x.size());
  EXPECT_EQ(a->stats().bytes_sent_single_copy, x.size());
}

// The peer writes the cell tags; the reader checks each before it trusts the count in it.
TEST(ShmTransport, CorruptCellsAreRefusedNotFollowed) {
  constexpr uint64_t kFirstCell = uint64_t{1} << 32;  // sequence number 1
  const uint64_t bad_tags[] = {
      kFirstCell | 0,                                       // empty
      kFirstCell | shm::Cell::kBulk | shm::Cell::kOffer | 8,  // two kinds
      kFirstCell | 57,                                      // inline, longer than a cell
      kFirstCell | shm::Cell::kBulk | (1 << 20),            // bulk, past the stretch limit
      kFirstCell | shm::Cell::kOffer | 4096,                // an offer nobody allowed
  };
  for (const uint64_t tag : bad_tags) {
    const std::string name = absl::StrCat("/weft-test-corrupt-", getpid(), "-", tag & 0xffffffff);
    auto receiver = shm::Ring::create(name, 1 << 16);
    ASSERT_TRUE(receiver.ok()) << receiver.status();
    auto sender = shm::Ring::attach(name, Deadline::after(absl::Seconds(5)), [] { return true; });
    ASSERT_TRUE(sender.ok()) << sender.status();
    // Cells start one page after the header (transport/shm/ring.cc).
    auto* cells = reinterpret_cast<shm::Cell*>(reinterpret_cast<std::byte*>(&sender->header()) + 4096);
    cells[0].tag.store(tag, std::memory_order_release);
    std::byte out[64];
    auto got = receiver->read_into(out, sizeof out);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << std::hex << tag;
    EXPECT_NE(got.status().message().find("corrupt"), absl::string_view::npos) << got.status();
  }
}

// ---- tcp only ----

const TransportCase kTcp{"tcp", "tcp", &tcp::make_transport};

/// A raw client socket on `address`, as a stranger would open it.
int dial_raw(const std::string& address) {
  auto addr = tcp::parse_address(address);
  if (!addr.ok()) return -1;
  const int fd = ::socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, addr->get(), addr->len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Whether the other end closed `fd` within `timeout` (EOF or reset; data is skipped).
bool closed_within(int fd, absl::Duration timeout) {
  const Deadline deadline = Deadline::after(timeout);
  char buf[256];
  for (int i = 0; i < 1000 && !deadline.expired(); ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, deadline.remaining_ms()) <= 0) continue;
    if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) return true;
  }
  return false;
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

/// Reads exactly `n` bytes from a blocking raw socket within `timeout`; fewer on close.
std::string read_raw(int fd, size_t n, absl::Duration timeout) {
  const Deadline deadline = Deadline::after(timeout);
  std::string out;
  char buf[256];
  while (out.size() < n && !deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, deadline.remaining_ms()) <= 0) continue;
    const ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), MSG_DONTWAIT);
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
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
  h.job_id = job, h.from_rank = 0, h.to_rank = 1, h.size = 2, h.nonce = fresh_nonce();
  const tcp::HelloWire hello = tcp::encode_hello(h);
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
    // Rank 0 by hand, recorded: hello, ack, proof; its link is taken.
    const int honest = dial_raw(listener);
    send_raw(honest, hello.data(), hello.size());
    const std::string ack = read_raw(honest, tcp::kAckBytes, absl::Seconds(3));
    if (ack.size() != tcp::kAckBytes) return absl::InternalError("no ack for the honest hello");
    tcp::AckWire ack_wire{};
    std::memcpy(ack_wire.data(), ack.data(), ack.size());
    const Proof proof = tcp::dialer_proof(kTestSecret, hello, ack_wire);
    send_raw(honest, proof.data(), proof.size());
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
    ::close(honest);
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

}  // namespace
}  // namespace weft::transport
