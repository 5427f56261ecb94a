// The rendezvous server's gate and its endings: strangers and ranks that cannot prove the
// job secret are ignored, mismatched sizes, duplicate ranks and foreign jobs are refused by
// name, and a server that times out or stops tells the ranks that came. Ranks are threads on
// loopback; every wait has a deadline of a few seconds.
#include "tests/unit/bootstrap_harness.hpp"
#include "tests/unit/stopwatch.hpp"

namespace weft {
namespace {

using namespace bootstrap_test;  // NOLINT: the harness reads as part of the tests
using ::testing::AllOf;
using ::testing::HasSubstr;

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
  const weft::testing::Stopwatch start;
  auto results = run_ranks(encode_unique_id((*server)->address(), job, kSecret), {{0, 3}, {1, 3}, {2, 4}},
                           absl::Seconds(2));
  const absl::Duration took = start.elapsed();
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
  const weft::testing::Stopwatch start;
  auto results = run_ranks(encode_unique_id((*server)->address(), job, kSecret), {{0, 3}, {2, 3}},
                           absl::Seconds(10));
  EXPECT_LT(start.elapsed(), absl::Seconds(3));
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
  weft::testing::Stopwatch start;
  EXPECT_EQ((*server)->wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*server)->done());
  EXPECT_LT(start.elapsed(), absl::Seconds(2));

  // A server far from its deadline still stops at once when destroyed.
  auto patient = RendezvousServer::start(RendezvousAddress::loopback_v4(0), 1, kSecret, 4,
                                         Deadline::after(absl::Hours(1)));
  ASSERT_TRUE(patient.ok()) << patient.status();
  start = weft::testing::Stopwatch();
  patient->reset();
  EXPECT_LT(start.elapsed(), absl::Seconds(1));

  // And a rank with nobody to meet gives up at its deadline.
  start = weft::testing::Stopwatch();
  auto alone = run_ranks(encode_unique_id(RendezvousAddress::loopback_v4(free_port()), 1, kSecret),
                         {{0, 2}}, absl::Milliseconds(500));
  EXPECT_EQ(alone[0].status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(start.elapsed(), absl::Seconds(2));
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
  const weft::testing::Stopwatch start;
  auto r = run_ranks(encode_unique_id((*server)->address(), job, kSecret), {{0, 2}}, absl::Seconds(10));
  stopper.join();
  EXPECT_EQ(r[0].status().code(), absl::StatusCode::kUnavailable) << r[0].status();
  EXPECT_EQ((*server)->wait().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(start.elapsed(), absl::Seconds(2));
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
