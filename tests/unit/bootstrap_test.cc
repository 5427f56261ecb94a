// The unique id and the TCP rendezvous, with ranks as threads, on loopback (and on this
// host's other address, to see where a coordinator listens). Every wait has a deadline of a
// few seconds and every test asserts how long it took, so a bug shows up as a failure rather
// than a hang.
#include "src/bootstrap.hpp"
#include "src/peer_info.hpp"
#include "src/bootstrap_wire.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/tcp/address.hpp"
#include "transport/tcp/rails.hpp"

namespace weft {
namespace {

// The job secret of every rendezvous and id in these tests.
const JobSecret kSecret = fresh_secret();

using ::testing::AllOf;
using ::testing::HasSubstr;

PeerInfo peer(int r) {
  PeerInfo p;
  p.pid = 1000 + r;
  p.host_id = absl::StrCat("host-", r % 3);
  p.addresses = {{"tcp", absl::StrCat("10.0.0.", r, ":1234")}, {"shm", absl::StrCat("/w", r)}};
  return p;
}

// A port nothing listens on right now (the kernel's pick for a socket we then close).
uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_storage ss;
  socklen_t len = RendezvousAddress::loopback_v4(0).to_sockaddr(ss);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&ss), len), 0);
  len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  close(fd);
  return RendezvousAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len)->port;
}

using Result = absl::StatusOr<std::vector<PeerInfo>>;

// Runs `ranks` (rank, size) pairs as threads against `id`, each after its delay.
std::vector<Result> run_ranks(const UniqueId& id, const std::vector<std::pair<int, int>>& ranks,
                              absl::Duration deadline,
                              const std::vector<absl::Duration>& delays = {}) {
  std::vector<Result> results(ranks.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      if (i < delays.size()) absl::SleepFor(delays[i]);
      auto [rank, size] = ranks[i];
      results[i] = bootstrap_exchange(id, rank, size, peer(rank), Deadline::after(deadline));
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void expect_full_table(const Result& r, int size) {
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(static_cast<int>(r->size()), size);
  for (int i = 0; i < size; ++i) {
    PeerInfo want = peer(i);
    want.rank = i;
    EXPECT_EQ((*r)[i].encode(), want.encode()) << "slot " << i;
  }
}

std::vector<std::pair<int, int>> all_ranks(int size) {
  std::vector<std::pair<int, int>> v;
  for (int r = 0; r < size; ++r) v.emplace_back(r, size);
  return v;
}

// The machine part of a host id is the boot id: virtual-cluster hosts differ in hostname
// and namespaces but share the machine's cores.
TEST(PeerInfo, MachineOfAHostIdIsItsBootId) {
  EXPECT_EQ(machine_of("h0/1234-abcd/net:[1]/ipc:[2]/pid:[3]"), "1234-abcd");
  EXPECT_EQ(machine_of("h1/1234-abcd/net:[9]/ipc:[2]/pid:[3]"), "1234-abcd");
  EXPECT_EQ(machine_of("h/boot"), "boot");
  EXPECT_EQ(machine_of("nothing"), "nothing");
  const std::string mine = local_host_id();
  EXPECT_FALSE(machine_of(mine).empty());
  EXPECT_EQ(mine.find(std::string(machine_of(mine))), mine.find('/') + 1);
}

TEST(UniqueId, RoundTrip) {
  RendezvousAddress a;
  a.address = {10, 1, 2, 3};
  a.port = 4567;
  const UniqueId id = encode_unique_id(a, 0x0123456789abcdefull, kSecret);
  auto d = decode_unique_id(id);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address, a);
  EXPECT_EQ(d->address.to_string(), "10.1.2.3:4567");
  EXPECT_EQ(d->job_id, 0x0123456789abcdefull);
  EXPECT_EQ(d->secret, kSecret);
  EXPECT_NE(fresh_secret(), fresh_secret());

  RendezvousAddress v6;
  v6.family = 6;
  v6.address[15] = 1;
  v6.port = 80;
  d = decode_unique_id(encode_unique_id(v6, 7, kSecret));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address.to_string(), "[::1]:80");
  EXPECT_NE(random_job_id(), random_job_id());
}

TEST(UniqueId, RejectsGarbage) {
  const UniqueId good = encode_unique_id(RendezvousAddress::loopback_v4(9), 1, kSecret);
  std::vector<UniqueId> bad(7);
  std::mt19937 rng(1);
  for (auto& b : bad[1].bytes) b = static_cast<uint8_t>(rng());
  bad[2] = good;
  bad[2].bytes[4] = 99;  // version
  bad[3] = good;
  bad[3].bytes[6] = 5;  // family
  bad[4] = good;
  bad[4].bytes[8] = bad[4].bytes[9] = 0;  // port 0
  bad[5] = good;
  bad[5].bytes[27] = 1;  // reserved, between the address and the job id
  bad[6] = good;
  bad[6].bytes[127] = 1;  // reserved, the last byte
  for (const auto& id : bad) {
    auto d = decode_unique_id(id);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(d.status().message()), HasSubstr("not a weft unique id"));
  }
}

TEST(UniqueId, CoordinatorIdsAgree) {
  auto a = unique_id_for_coordinator("127.0.0.1:29500");
  auto b = unique_id_for_coordinator("127.0.0.1:29500");
  auto c = unique_id_for_coordinator("127.0.0.1:29501");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status() << b.status() << c.status();
  EXPECT_EQ(a->bytes, b->bytes);
  EXPECT_NE(decode_unique_id(*a)->job_id, decode_unique_id(*c)->job_id);
  EXPECT_EQ(decode_unique_id(*a)->address, RendezvousAddress::loopback_v4(29500));
  auto localhost = unique_id_for_coordinator("localhost:29500");
  ASSERT_TRUE(localhost.ok()) << localhost.status();
  EXPECT_TRUE(decode_unique_id(*localhost)->address.is_loopback());
  auto v6 = unique_id_for_coordinator("[::1]:29500");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(decode_unique_id(*v6)->address.to_string(), "[::1]:29500");
  for (const char* bad : {"node0", "node0:", ":80", "node0:0", "node0:65536", "node0:8x",
                          "[::1:80", "::1:80"}) {
    auto r = unique_id_for_coordinator(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(absl::StrCat("WEFT_COORDINATOR=", bad)));
  }
}

class Rendezvous : public ::testing::TestWithParam<int> {};

TEST_P(Rendezvous, EveryRankGetsTheSameTable) {
  const int size = GetParam();
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, size,
                                        Deadline::after(absl::Seconds(10)));
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time start = absl::Now();
  auto results = run_ranks(encode_unique_id((*server)->address(), job, kSecret), all_ranks(size),
                           absl::Seconds(10));
  for (const auto& r : results) expect_full_table(r, size);
  EXPECT_TRUE((*server)->wait().ok()) << (*server)->wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

INSTANTIATE_TEST_SUITE_P(Sizes, Rendezvous, ::testing::Values(1, 2, 5, 16));

TEST(Bootstrap, MakeUniqueIdServesInThisProcess) {
  auto id = make_unique_id();
  ASSERT_TRUE(id.ok()) << id.status();
  auto results = run_ranks(*id, all_ranks(3), absl::Seconds(10));
  for (const auto& r : results) expect_full_table(r, 3);
}

TEST(Bootstrap, RandomOrderAndLateServer) {
  // The coordinator flavour: rank 0 (which serves) comes last, after the others have been
  // retrying against a port nobody listens on.
  const int size = 6;
  const std::string coordinator = absl::StrCat("127.0.0.1:", free_port());
  std::vector<int> order(size - 1);
  for (int i = 0; i < size - 1; ++i) order[i] = i + 1;
  std::shuffle(order.begin(), order.end(), std::mt19937(std::random_device()()));
  std::vector<Result> results(size, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  auto run = [&](int rank) {
    results[rank] = bootstrap_from_coordinator(coordinator, "", rank, size, peer(rank),
                                               Deadline::after(absl::Seconds(10)));
  };
  for (int i = 0; i < size - 1; ++i) {
    threads.emplace_back([&, i] {
      absl::SleepFor(absl::Milliseconds(20 * i));
      run(order[i]);
    });
  }
  absl::SleepFor(absl::Milliseconds(300));
  threads.emplace_back([&] { run(0); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) expect_full_table(r, size);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// An IPv4 address of this host that is not loopback (the one the tcp transport would pick),
// or "" when the host has only loopback.
std::string non_loopback_ipv4() {
  auto ip = transport::tcp::choose_listen_ip("");
  return ip.ok() && *ip != "127.0.0.1" ? *ip : "";
}

RendezvousAddress ipv4_address(const std::string& ip, uint16_t port) {
  auto sa = transport::tcp::make_sockaddr(ip, port);
  EXPECT_TRUE(sa.ok()) << sa.status();
  return *RendezvousAddress::from_sockaddr(sa->get(), sa->len);
}

// 0 when something accepts a TCP connection at `a`, else connect's errno (ECONNREFUSED:
// nothing listens there).
int try_connect(const RendezvousAddress& a) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const timeval two_seconds{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &two_seconds, sizeof two_seconds);
  sockaddr_storage ss;
  const socklen_t len = a.to_sockaddr(ss);
  const int err = connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0 ? 0 : errno;
  close(fd);
  return err;
}

// Retries for a few seconds while rank 0 (a thread) gets its server up.
bool accepts_soon(const RendezvousAddress& a) {
  const Deadline deadline = Deadline::after(absl::Seconds(5));
  while (!deadline.expired()) {
    if (try_connect(a) == 0) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// Rank 0 of a 2-rank WEFT_COORDINATOR job serves while the test probes; rank 1 then joins
// through `join`, and both must get the table.
void serve_probe_join(const std::string& coordinator, const std::string& socket_ifname,
                      const std::function<void()>& probe, const UniqueId& join) {
  Result rank0 = absl::UnknownError("not run");
  std::thread server([&] {
    rank0 = bootstrap_from_coordinator(coordinator, socket_ifname, 0, 2, peer(0),
                                       Deadline::after(absl::Seconds(10)));
  });
  probe();
  auto rank1 = run_ranks(join, {{1, 2}}, absl::Seconds(10));
  server.join();
  expect_full_table(rank0, 2);
  expect_full_table(rank1[0], 2);
}

// Told to use `lo`, rank 0 serves a coordinator named by another local address on loopback
// only: that other address refuses connections, so no other network reaches the rendezvous.
TEST(Bootstrap, CoordinatorListensOnlyOnSocketIfname) {
  const std::string other = non_loopback_ipv4();
  if (other.empty()) GTEST_SKIP() << "this host has no address but loopback";
  const uint16_t port = free_port();
  const std::string coordinator = absl::StrCat(other, ":", port);
  auto decoded = decode_unique_id(*unique_id_for_coordinator(coordinator));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const RendezvousAddress on_lo = RendezvousAddress::loopback_v4(port);
  serve_probe_join(coordinator, "lo", [&] {
    ASSERT_TRUE(accepts_soon(on_lo)) << "rank 0 never served on " << on_lo.to_string();
    EXPECT_EQ(try_connect(ipv4_address(other, port)), ECONNREFUSED)
        << "rank 0, told WEFT_SOCKET_IFNAME=lo, also listens on " << other;
  }, encode_unique_id(on_lo, decoded->job_id, decoded->secret));
}

// Without WEFT_SOCKET_IFNAME, rank 0 serves on the address the coordinator names, not on
// every interface: loopback refuses.
TEST(Bootstrap, CoordinatorListensOnlyOnItsOwnAddress) {
  const std::string other = non_loopback_ipv4();
  if (other.empty()) GTEST_SKIP() << "this host has no address but loopback";
  const uint16_t port = free_port();
  const std::string coordinator = absl::StrCat(other, ":", port);
  serve_probe_join(coordinator, "", [&] {
    ASSERT_TRUE(accepts_soon(ipv4_address(other, port)))
        << "rank 0 never served on " << coordinator;
    EXPECT_EQ(try_connect(RendezvousAddress::loopback_v4(port)), ECONNREFUSED)
        << "rank 0 serves " << coordinator << " on loopback too";
  }, *unique_id_for_coordinator(coordinator));
}

// A coordinator that is none of this host's addresses (TEST-NET-3) cannot be served without
// an interface to serve on, and the error says what to set; with one, rank 0 serves there
// and meets itself there.
TEST(Bootstrap, CoordinatorElsewhereNeedsSocketIfname) {
  const std::string coordinator = absl::StrCat("203.0.113.7:", free_port());
  const absl::Time start = absl::Now();
  auto alone = bootstrap_from_coordinator(coordinator, "", 0, 1, peer(0),
                                          Deadline::after(absl::Seconds(10)));
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition) << alone.status();
  EXPECT_THAT(std::string(alone.status().message()),
              AllOf(HasSubstr("WEFT_COORDINATOR=" + coordinator), HasSubstr("203.0.113.7"),
                    HasSubstr("not an address of this host"), HasSubstr("set WEFT_SOCKET_IFNAME")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "the error must come at once";

  auto missing = bootstrap_from_coordinator(coordinator, "nosuch0", 0, 1, peer(0),
                                            Deadline::after(absl::Seconds(10)));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              AllOf(HasSubstr("rank 0 cannot serve"), HasSubstr("WEFT_SOCKET_IFNAME=nosuch0")));

  expect_full_table(bootstrap_from_coordinator(coordinator, "lo", 0, 1, peer(0),
                                               Deadline::after(absl::Seconds(10))),
                    1);
}

TEST(Bootstrap, LateServerForAGivenId) {
  const uint64_t job = random_job_id();
  const RendezvousAddress where = RendezvousAddress::loopback_v4(free_port());
  const UniqueId id = encode_unique_id(where, job, kSecret);
  std::unique_ptr<RendezvousServer> server;
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(400));
    server = *RendezvousServer::start(where, job, kSecret, 4, Deadline::after(absl::Seconds(10)));
  });
  auto results = run_ranks(id, {{3, 4}, {0, 4}, {2, 4}, {1, 4}}, absl::Seconds(10));
  late.join();
  for (const auto& r : results) expect_full_table(r, 4);
}

// A raw connection that sends `bytes` and then waits for the server to close it.
bool server_closes_after(const RendezvousAddress& a, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_storage ss;
  const socklen_t len = a.to_sockaddr(ss);
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) return false;
  send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  pollfd p{fd, POLLIN, 0};
  char c;
  const bool closed = poll(&p, 1, 3000) == 1 && recv(fd, &c, 1, 0) <= 0;
  close(fd);
  return closed;
}

TEST(Bootstrap, StrangersAreIgnored) {
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, 3,
                                        Deadline::after(absl::Seconds(10)));
  ASSERT_TRUE(server.ok()) << server.status();
  const RendezvousAddress a = (*server)->address();
  EXPECT_TRUE(server_closes_after(a, "GET / HTTP/1.0\r\n\r\nand some more garbage bytes"));
  // Right magic, then a 4 GiB peer info: dropped without reading it.
  std::string huge("WEFT\x01\x00\x00\x00", 8);
  huge.append(reinterpret_cast<const char*>(&job), 8);
  huge.append(std::string("\0\0\0\0\3\0\0\0\xff\xff\xff\xff", 12));
  huge.append(16, '\0');  // the nonce
  EXPECT_TRUE(server_closes_after(a, huge));
  sockaddr_storage ss;
  const socklen_t len = a.to_sockaddr(ss);
  // A port scanner: connects and leaves at once.
  int scanner = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(scanner, reinterpret_cast<sockaddr*>(&ss), len), 0);
  close(scanner);
  // A silent stranger that stays connected throughout.
  int silent = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(silent, reinterpret_cast<sockaddr*>(&ss), len), 0);
  auto results = run_ranks(encode_unique_id(a, job, kSecret), all_ranks(3), absl::Seconds(10));
  for (const auto& r : results) expect_full_table(r, 3);
  EXPECT_TRUE((*server)->wait().ok());
  close(silent);
}

// A raw connection to the rendezvous, to act out by hand what a stranger or a replaying
// attacker would do.
struct RawConn {
  int fd = -1;
  explicit RawConn(const RendezvousAddress& a) : fd(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_storage ss;
    const socklen_t len = a.to_sockaddr(ss);
    if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) fd = -1;
  }
  ~RawConn() {
    if (fd >= 0) close(fd);
  }
  void put(std::string_view bytes) const { send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  // Up to n bytes, within 3 s; fewer when the server closes.
  std::string take(size_t n) const {
    std::string out;
    const Deadline deadline = Deadline::after(absl::Seconds(3));
    while (out.size() < n && !deadline.expired()) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, deadline.remaining_ms()) <= 0) continue;
      char buf[256];
      const ssize_t got = recv(fd, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) break;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }
  bool closed_by_server() const { return take(1).empty(); }
};

// Only ranks that prove the job secret count: a rank given another secret learns that the
// server cannot prove it; a stranger that knows the job id (it is not secret) is dropped; a
// recorded exchange replayed later is dropped; the real ranks still get their table.
TEST(Bootstrap, OnlyRanksThatProveTheSecretCount) {
  namespace wire = bootstrap_wire;
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, 2,
                                        Deadline::after(absl::Seconds(10)));
  ASSERT_TRUE(server.ok()) << server.status();
  const RendezvousAddress a = (*server)->address();

  auto wrong = run_ranks(encode_unique_id(a, job, fresh_secret()), {{0, 2}}, absl::Seconds(3));
  EXPECT_EQ(wrong[0].status().code(), absl::StatusCode::kPermissionDenied) << wrong[0].status();
  EXPECT_THAT(std::string(wrong[0].status().message()), HasSubstr("job secret"));

  PeerInfo one = peer(1);
  one.rank = 1;
  const std::string hello = wire::encode_hello(job, 1, 2, fresh_nonce(), one.encode());
  {
    RawConn stranger(a);
    stranger.put(hello);
    EXPECT_EQ(stranger.take(wire::kChallengeBytes).size(), wire::kChallengeBytes);
    stranger.put(std::string(sizeof(Proof), '\0'));
    EXPECT_TRUE(stranger.closed_by_server()) << "a stranger without the secret was kept";
  }
  // Rank 1 by hand, recorded.
  RawConn honest(a);
  honest.put(hello);
  const std::string challenge = honest.take(wire::kChallengeBytes);
  ASSERT_EQ(challenge.size(), wire::kChallengeBytes);
  const Proof proof = wire::rank_proof(kSecret, hello, challenge);
  honest.put(as_text(proof));
  {
    RawConn replay(a);
    replay.put(hello);
    EXPECT_NE(replay.take(wire::kChallengeBytes), challenge) << "the server repeated its nonce";
    replay.put(as_text(proof));
    EXPECT_TRUE(replay.closed_by_server()) << "a replayed exchange was taken";
  }
  auto results = run_ranks(encode_unique_id(a, job, kSecret), {{0, 2}}, absl::Seconds(10));
  expect_full_table(results[0], 2);
  const std::string reply = honest.take(wire::kReplyHeaderBytes);
  ASSERT_EQ(reply.size(), wire::kReplyHeaderBytes);
  EXPECT_EQ(wire::parse_reply_header(reply).code, 0u) << "the hand-made rank 1 got the table";
  EXPECT_TRUE((*server)->wait().ok());
}

TEST(Bootstrap, SizeMismatchNamesBothSizesAndNobodyHangs) {
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, 3,
                                        Deadline::after(absl::Seconds(10)));
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time start = absl::Now();
  auto results = run_ranks(encode_unique_id((*server)->address(), job, kSecret), {{0, 3}, {1, 3}, {2, 4}},
                           absl::Seconds(2));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(results[2].ok());
  EXPECT_EQ(results[2].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(results[2].status().message()),
              AllOf(HasSubstr("rank 2"), HasSubstr("4 ranks"), HasSubstr("serves 3 ranks")));
  for (int i : {0, 1}) {
    ASSERT_FALSE(results[i].ok());
    EXPECT_EQ(results[i].status().code(), absl::StatusCode::kDeadlineExceeded)
        << results[i].status();
  }
  EXPECT_LT(took, absl::Seconds(4));
}

TEST(Bootstrap, LearnedSizeMismatch) {
  // make_unique_id's server learns the size from the first hello.
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, 0,
                                        Deadline::after(absl::Seconds(10)));
  ASSERT_TRUE(server.ok()) << server.status();
  const UniqueId id = encode_unique_id((*server)->address(), job, kSecret);
  auto first = run_ranks(id, {{0, 2}}, absl::Milliseconds(300));
  EXPECT_EQ(first[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::SleepFor(absl::Milliseconds(100));  // lets the server see rank 0 leave
  // Rank 0 left, so its slot is free again; a rank with another size is refused.
  auto second = run_ranks(id, {{1, 5}}, absl::Seconds(2));
  ASSERT_FALSE(second[0].ok());
  EXPECT_THAT(std::string(second[0].status().message()),
              AllOf(HasSubstr("5 ranks"), HasSubstr("serves 2 ranks"), HasSubstr("rank 0")));
  for (const auto& r : run_ranks(id, all_ranks(2), absl::Seconds(5))) expect_full_table(r, 2);
}

TEST(Bootstrap, DuplicateRankAndForeignJobAreRefused) {
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, 2,
                                        Deadline::after(absl::Seconds(10)));
  ASSERT_TRUE(server.ok()) << server.status();
  const RendezvousAddress a = (*server)->address();
  auto foreign = run_ranks(encode_unique_id(a, job + 1, kSecret), {{0, 2}}, absl::Seconds(2));
  EXPECT_EQ(foreign[0].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(foreign[0].status().message()), HasSubstr("another job"));
  const UniqueId id = encode_unique_id(a, job, kSecret);
  auto results = run_ranks(id, {{1, 2}, {1, 2}, {0, 2}}, absl::Seconds(3),
                           {absl::ZeroDuration(), absl::Milliseconds(200), absl::Milliseconds(400)});
  expect_full_table(results[0], 2);
  expect_full_table(results[2], 2);
  ASSERT_FALSE(results[1].ok());
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(results[1].status().message()), HasSubstr("already joined"));
}

TEST(Bootstrap, ServerTimeoutTellsTheRanksThatCame) {
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, 3,
                                        Deadline::after(absl::Milliseconds(500)));
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time start = absl::Now();
  auto results = run_ranks(encode_unique_id((*server)->address(), job, kSecret), {{0, 3}, {2, 3}},
                           absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (const auto& r : results) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("missing rank(s) 1"));
  }
  EXPECT_EQ((*server)->wait().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(Bootstrap, NobodyArrives) {
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), 1, kSecret, 4,
                                        Deadline::after(absl::Milliseconds(200)));
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Time start = absl::Now();
  EXPECT_EQ((*server)->wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*server)->done());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  // A server far from its deadline still stops at once when destroyed.
  auto patient = RendezvousServer::start(RendezvousAddress::loopback_v4(0), 1, kSecret, 4,
                                         Deadline::after(absl::Hours(1)));
  ASSERT_TRUE(patient.ok()) << patient.status();
  start = absl::Now();
  patient->reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));

  // And a rank with nobody to meet gives up at its deadline.
  start = absl::Now();
  auto alone = run_ranks(encode_unique_id(RendezvousAddress::loopback_v4(free_port()), 1, kSecret),
                         {{0, 2}}, absl::Milliseconds(500));
  EXPECT_EQ(alone[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(Bootstrap, StoppedServerFailsWaitingRanks) {
  const uint64_t job = random_job_id();
  auto server = RendezvousServer::start(RendezvousAddress::loopback_v4(0), job, kSecret, 2,
                                        Deadline::after(absl::Seconds(10)));
  ASSERT_TRUE(server.ok()) << server.status();
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    (*server)->stop();
  });
  const absl::Time start = absl::Now();
  auto r = run_ranks(encode_unique_id((*server)->address(), job, kSecret), {{0, 2}}, absl::Seconds(10));
  stopper.join();
  EXPECT_EQ(r[0].status().code(), absl::StatusCode::kUnavailable) << r[0].status();
  EXPECT_EQ((*server)->wait().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(Bootstrap, BadArguments) {
  const UniqueId id = encode_unique_id(RendezvousAddress::loopback_v4(1), 1, kSecret);
  const Deadline d = Deadline::after(absl::Seconds(1));
  EXPECT_EQ(bootstrap_exchange(id, 2, 2, peer(2), d).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bootstrap_exchange(id, 0, 0, peer(0), d).status().code(),
            absl::StatusCode::kInvalidArgument);
  PeerInfo other = peer(0);
  other.rank = 1;
  EXPECT_EQ(bootstrap_exchange(id, 0, 2, other, d).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bootstrap_exchange(UniqueId{}, 0, 2, peer(0), d).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weft
