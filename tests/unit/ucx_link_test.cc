// The ucx transport's own behaviour on one host, beside the conformance suite that runs over
// it (transport_test.cc): which side writes into the peer's mailbox, and what goes by
// rendezvous. Loopback only; every wait is bounded.
#ifdef WEFT_HAVE_UCX

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/scoped_env.hpp"
#include "tests/unit/transport_harness.hpp"
#include "transport/ucx/pair.hpp"

namespace weft::transport {
namespace {

// A ring's links and a chain broadcast's carry bytes one way, and the lower rank of such a
// link never receives on it. It reads its peer's hello from its sends instead, and so writes
// its small messages into the peer's mailbox, as the higher rank does, rather than each by tag.
TEST(UcxLinkTest, SideThatOnlySendsWritesIntoThePeersMailbox) {
  Ranks r = make_ranks(TransportCase{"ucx_shm", "ucx", ucx_over("shm"), false}, 2);
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  auto* lower = dynamic_cast<ucx::UcxPair*>(a.get());
  auto* higher = dynamic_cast<ucx::UcxPair*>(b.get());
  ASSERT_NE(lower, nullptr);
  ASSERT_NE(higher, nullptr);
  // The higher rank read the lower's hello when it opened the link.
  if (!higher->writes_packets()) GTEST_SKIP() << "UCX maps no shared memory between these ranks";
  EXPECT_FALSE(lower->writes_packets()) << "the lower rank has received nothing yet";
  const auto msg = make_message(5, 200);
  for (int i = 0; i < 50; ++i) {
    std::vector<std::byte> got(msg.size());
    const size_t arrived = pump(
        msg.size(), [&](size_t out) { return a->send_some(msg.data() + out, msg.size() - out); },
        [&](size_t in) { return b->recv_into(got.data() + in, got.size() - in); });
    ASSERT_EQ(arrived, msg.size());
    ASSERT_TRUE(got == msg) << "message " << i;
  }
  EXPECT_TRUE(lower->writes_packets())
      << "the side that only sends never read its peer's hello, and sent every message by tag";
}

// On one host the caller's input (lend_input) goes by rendezvous from 64 KiB, read by the peer
// in one copy; an offer of bytes just written (lend_some) goes as a packet up to 256 KiB, and
// so does input below 64 KiB.
TEST(UcxLinkTest, CallersInputFrom64KiBGoesByRendezvous) {
  Ranks r = make_ranks(TransportCase{"ucx_shm", "ucx", ucx_over("shm"), false}, 2);
  ASSERT_EQ(r.transports.size(), 2u);
  std::unique_ptr<Pair> a, b;
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  auto* sender = dynamic_cast<ucx::UcxPair*>(b.get());  // the higher rank: it has the hello
  ASSERT_NE(sender, nullptr);
  if (!sender->writes_packets()) GTEST_SKIP() << "UCX maps no shared memory between these ranks";
  using Lend = absl::StatusOr<size_t> (Pair::*)(const std::byte*, size_t);
  const auto move = [&](Lend lend, size_t bytes, uint64_t seed) {
    const auto msg = make_message(seed, bytes);
    std::vector<std::byte> got(bytes);
    const size_t arrived = pump(
        bytes, [&](size_t out) { return (b.get()->*lend)(msg.data() + out, bytes - out); },
        [&](size_t in) { return a->recv_into(got.data() + in, got.size() - in); });
    EXPECT_EQ(arrived, bytes);
    EXPECT_TRUE(got == msg) << bytes << " bytes";
  };
  move(&Pair::lend_some, 128 << 10, 1);
  move(&Pair::lend_input, 32 << 10, 2);
  EXPECT_EQ(sender->bytes_offered_by_rendezvous(), 0u);
  move(&Pair::lend_input, (128 << 10) + 3, 3);
  EXPECT_EQ(sender->bytes_offered_by_rendezvous(), (128u << 10) + 3);
}

}  // namespace
}  // namespace weft::transport

#endif  // WEFT_HAVE_UCX
