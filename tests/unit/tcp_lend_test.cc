// What only the tcp transport does with lent bytes (Pair::lend_some): it sends them from the
// caller's buffer and keeps no copy while the call lasts, and when the call ends it copies
// what is still unacknowledged into its retention ring, so that bytes sent again after the
// caller has written over its buffer are still the bytes that were lent.
// transport_test.cc runs the suite every transport passes.
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/transport_harness.hpp"
#include "transport/tcp/context.hpp"

namespace weft::transport {
namespace {

const TransportCase kTcp{"tcp", "tcp", &tcp::make_transport};

constexpr size_t kLent = size_t{3} << 20;
// Left unread when the call ends: whole 64 KiB checksummed frames still in the socket, beyond
// the one the receiver holds.
constexpr size_t kUnread = size_t{192} << 10;
constexpr size_t kAfter = size_t{256} << 10;  // sent after the call

using Send = std::function<absl::StatusOr<size_t>(size_t at)>;

// Drives `a` sending and `b` receiving until `a` has at least `until_sent` taken and `b` holds
// `until_received` bytes, or `stop` says so; false past the deadline.
bool run(Pair& a, Pair& b, const Send& send, size_t until_sent, std::vector<std::byte>& got,
         size_t until_received, size_t& sent, size_t& received,
         const std::function<bool()>& stop = nullptr) {
  const Deadline deadline = Deadline::after(kTransferTimeout);
  for (uint64_t round = 0; round < kMaxRounds && !deadline.expired(); ++round) {
    if (sent < until_sent) {
      auto n = send(sent);
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok()) return false;
      sent += *n;
    }
    if (received < until_received) {
      auto n = b.recv_into(got.data() + received, until_received - received);
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok()) return false;
      received += *n;
    }
    if (stop ? stop() : sent >= until_sent && received == until_received) return true;
    (void)a.tend();
    (void)b.tend();
  }
  ADD_FAILURE() << "sent " << sent << " of " << until_sent << ", received " << received << " of "
                << until_received;
  return false;
}

TEST(TcpLend, BytesSentAgainAfterTheCallEndedAreTheBytesLent) {
  Ranks r = make_ranks(kTcp, 2, random_seed(), kTestSecret,
                       [](TransportInit& init) { init.checksum = true; });
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  const uint64_t seed = random_seed();
  const std::vector<std::byte> want = make_message(seed, kLent + kAfter);
  std::vector<std::byte> lent(want.begin(), want.begin() + kLent);
  std::vector<std::byte> got(want.size());
  size_t sent = 0, received = 0;

  // The call: everything lent is taken while the receiver still lacks its last bytes, whose
  // acknowledgement therefore has not come.
  const Send lend = [&](size_t at) { return a->lend_some(lent.data() + at, kLent - at); };
  ASSERT_TRUE(run(*a, *b, lend, kLent, got, kLent - kUnread, sent, received));
  a->call_ends();
  std::memset(lent.data(), 0xee, lent.size());  // the caller's buffer is its own again

  // The unread frames arrive corrupt: the receiver drops them and asks for them again, and
  // the sender sends them from what it kept.
  b->inject_corruption(1.0);
  const Send none = [](size_t) { return absl::StatusOr<size_t>(size_t{0}); };
  ASSERT_TRUE(run(*a, *b, none, 0, got, kLent, sent, received,
                  [&] { return b->stats().checksum_errors > 0; }));
  b->inject_corruption(0);
  sent = 0;
  const Send after = [&](size_t at) { return a->send_some(want.data() + kLent + at, kAfter - at); };
  ASSERT_TRUE(run(*a, *b, after, kAfter, got, want.size(), sent, received));
  EXPECT_EQ(first_mismatch(got, seed), -1) << "of " << got.size() << " bytes";
  EXPECT_GE(a->stats().bytes_resent, kUnread - (size_t{64} << 10))
      << "the unread frames were not sent again";
}

}  // namespace
}  // namespace weft::transport
