// The unique id and the TCP rendezvous, with ranks as threads, on loopback (and on this
// host's other address, to see where a coordinator listens). Every wait has a deadline of a
// few seconds and every test asserts how long it took, so a bug shows up as a failure rather
// than a hang. rendezvous_server_test.cc tests whom the server admits and how it ends.
#include "tests/unit/bootstrap_harness.hpp"
#include "tests/unit/stopwatch.hpp"

namespace weft {
namespace {

using namespace bootstrap_test;  // NOLINT: the harness reads as part of the tests
using ::testing::AllOf;
using ::testing::HasSubstr;

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
  const weft::testing::Stopwatch start;
  auto results = run_ranks(encode_unique_id((*server)->address(), job, kSecret), all_ranks(size),
                           absl::Seconds(10));
  for (const auto& r : results) expect_full_table(r, size);
  EXPECT_TRUE((*server)->wait().ok()) << (*server)->wait();
  EXPECT_LT(start.elapsed(), absl::Seconds(5));
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
  const weft::testing::Stopwatch start;
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
  EXPECT_LT(start.elapsed(), absl::Seconds(5));
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
  const weft::testing::Stopwatch start;
  auto alone = bootstrap_from_coordinator(coordinator, "", 0, 1, peer(0),
                                          Deadline::after(absl::Seconds(10)));
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition) << alone.status();
  EXPECT_THAT(std::string(alone.status().message()),
              AllOf(HasSubstr("WEFT_COORDINATOR=" + coordinator), HasSubstr("203.0.113.7"),
                    HasSubstr("not an address of this host"), HasSubstr("set WEFT_SOCKET_IFNAME")));
  EXPECT_LT(start.elapsed(), absl::Seconds(2)) << "the error must come at once";

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

}  // namespace
}  // namespace weft
