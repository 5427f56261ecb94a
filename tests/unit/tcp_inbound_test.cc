// The receiving half of a tcp link (transport/tcp/inbound.hpp) against frames written by
// hand, for orders of events that two live ends produce only by chance: a receiver that asked
// for a resend before it saw the sender's new epoch, holding on its only live path a frame of
// that epoch beyond a gap, with the epoch after it queued behind.
#include "transport/tcp/inbound.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "transport/tcp/frame.hpp"
#include "transport/tcp/outbound.hpp"
#include "transport/tcp/path.hpp"
#include "tests/unit/tcp_test_path.hpp"

namespace weft::transport::tcp {
namespace {

/// Receives until `want` bytes came or `tries` receives passed; checks each byte.
size_t receive(Inbound& in, uint64_t& at, size_t want, int tries = 100) {
  size_t got = 0;
  auto take = [&](const std::byte* d, size_t n) {
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(d[k], std::byte{static_cast<uint8_t>((at + k) % 251)}) << "at " << at + k;
    }
    at += n, got += n;
  };
  const Sink sink = take;
  for (int i = 0; i < tries && got < want; ++i) {
    auto n = in.receive(want - got, nullptr, &sink);
    EXPECT_TRUE(n.ok()) << n.status();
    if (!n.ok()) break;
  }
  return got;
}

// A receiving half over two paths, each written by hand.
struct TwoPaths {
  TestPath p0{0}, p1{1};
  LinkEvents events{1, 0, "test"};
  RidingAcks acks;
  Inbound in{{p0.data.get(), p1.data.get()}, {p0.control.get(), p1.control.get()}, LinkFaults{},
             &events, &acks};
};

TEST(TcpInbound, AFrameBeyondAGapOnEveryLivePathIsReadPastToTheNextEpoch) {
  TwoPaths link;
  auto& [p0, p1, events, acks, in] = link;
  uint64_t at = 0;
  p0.send(0, 0, 100, /*next_path=*/1);
  ASSERT_EQ(receive(in, at, 100), 100u);
  // Path 1 dies before anything of the sender's epoch 1 arrived: this end asks for a resend
  // as of epoch 0, so it still takes epoch 1.
  in.lost(1, "a test's partition");
  // Epoch 1 striped [100, 200) over path 1, gone, and [200, 300) over path 0; the sender
  // then heard of the loss and sent everything again from 100 in epoch 2, over path 0.
  p0.send(1, 200, 100, 1);
  p0.send(2, 100, 300, 0);
  EXPECT_EQ(receive(in, at, 300), 300u) << "stuck behind the frame beyond the gap";
  EXPECT_EQ(at, 400u);
}

TEST(TcpInbound, AFrameBeyondAGapWaitsWhileAnotherPathMayStillFillIt) {
  TwoPaths link;
  auto& [p0, p1, events, acks, in] = link;
  uint64_t at = 0;
  p0.send(0, 0, 100, 1);
  p0.send(0, 200, 100, 1);  // [100, 200) is on its way over path 1
  ASSERT_EQ(receive(in, at, 300, 5), 100u);
  std::array<std::byte, 64> control{};
  EXPECT_LT(::read(p0.control_peer, control.data(), control.size()), 0)
      << "a resend was asked for while path 1 lives and holds nothing yet";
  p1.send(0, 100, 100, 0);
  EXPECT_EQ(receive(in, at, 200), 200u);
  EXPECT_EQ(at, 300u);
}

// What the peer's data frames carried reaches the sending half; the control socket
// acknowledges only what no data frame of this end carried.
// A checksummed frame is read whole and checked before its first byte is handed over. When
// it is dropped half handed over (a resend request made it stale), the frame the sender
// resumes with on the same path must be read and checked in its turn, not taken for the
// dropped one (whose bytes would then be handed over a second time, at the wrong offset).
TEST(TcpInbound, ACheckedFrameDroppedHalfHandedOverIsNotTakenForTheNext) {
  TwoPaths t;
  uint64_t at = 0;
  t.p0.send(/*epoch=*/0, /*offset=*/0, 1000, /*next_path=*/0, 0, false, /*checksummed=*/true);
  ASSERT_EQ(receive(t.in, at, 300), 300u);
  t.in.lost(1, "test: path 1 fails");  // a resend request from byte 300: epoch 0 is stale
  t.p0.send(/*epoch=*/1, /*offset=*/300, 700, /*next_path=*/0, 0, false, /*checksummed=*/true);
  EXPECT_EQ(receive(t.in, at, 700), 700u);
  EXPECT_TRUE(t.in.failed().ok()) << t.in.failed();
  EXPECT_TRUE(t.p0.data->alive()) << t.p0.data->cause();
}

TEST(TcpInbound, AcknowledgementsRideOnDataFramesBothWays) {
  TestPath p0(0);
  LinkEvents events(1, 0, "test");
  RidingAcks acks;
  Inbound in({p0.data.get()}, {p0.control.get()}, LinkFaults{}, &events, &acks);
  uint64_t at = 0;
  constexpr uint32_t kFrameBytes = 64 << 10;
  const uint64_t kAckEveryBytes = ack_every_bytes(1);
  // This end's own frames carry each byte as soon as it is consumed: no control frame.
  for (uint64_t off = 0; off < kAckEveryBytes; off += kFrameBytes) {
    p0.send(0, off, kFrameBytes, 0, /*ack=*/3 * off);
    ASSERT_EQ(receive(in, at, kFrameBytes), kFrameBytes);
    EXPECT_EQ(acks.consumed, at);
    EXPECT_EQ(acks.peer_consumed, 3 * off);
    acks.carried = acks.consumed;  // as the sending half's next frame does
  }
  std::byte control[kFrameHeaderBytes];
  EXPECT_LT(::read(p0.control_peer, control, sizeof control), 0) << "an acknowledgement twice";
  // No frame of this end carries the next kAckEveryBytes: the control socket does.
  for (uint64_t off = kAckEveryBytes; off < 2 * kAckEveryBytes; off += kFrameBytes) {
    p0.send(0, off, kFrameBytes, 0);
    ASSERT_EQ(receive(in, at, kFrameBytes), kFrameBytes);
  }
  ASSERT_EQ(::read(p0.control_peer, control, sizeof control), ssize_t{sizeof control});
  auto ack = decode_frame(control);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->type, Frame::kAck);
  EXPECT_EQ(ack->offset, 2 * kAckEveryBytes);
  EXPECT_EQ(acks.peer_consumed, 3 * (kAckEveryBytes - kFrameBytes)) << "a header without one";
  // Whatever rides on data, the control socket acknowledges everything every half window: a
  // sender waiting for room may not be reading this end's frames.
  const uint64_t half = ack_all_every_bytes(1);
  const uint64_t from = at;
  for (uint64_t off = from; off < from + half; off += kFrameBytes) {
    EXPECT_LT(::read(p0.control_peer, control, sizeof control), 0) << "before half a window";
    p0.send(0, off, kFrameBytes, 0);
    ASSERT_EQ(receive(in, at, kFrameBytes), kFrameBytes);
    acks.carried = acks.consumed;
  }
  ASSERT_EQ(::read(p0.control_peer, control, sizeof control), ssize_t{sizeof control});
  ack = decode_frame(control);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->offset, from + half);
}

// A sender that lent its bytes waits, when its call ends, for their acknowledgement rather than
// copy them (outbound.hpp): the receiver sends it once its own call has received its last
// byte, and only for frames marked lent that no frame of its own carried back.
TEST(TcpInbound, LentFramesAreAcknowledgedWhenTheCallHasReceivedThem) {
  TestPath p0(0);
  LinkEvents events(1, 0, "test");
  RidingAcks acks;
  Inbound in({p0.data.get()}, {p0.control.get()}, LinkFaults{}, &events, &acks);
  uint64_t at = 0;
  constexpr uint32_t kBytes = 4096;
  p0.send(0, 0, kBytes, 0);
  ASSERT_EQ(receive(in, at, kBytes), kBytes);
  in.call_received();
  EXPECT_FALSE(TestPath::read_frame(p0.control_peer)) << "nobody waits for bytes not lent";

  p0.send(0, kBytes, kBytes, 0, 0, /*lent=*/true);
  ASSERT_EQ(receive(in, at, kBytes), kBytes);
  EXPECT_FALSE(TestPath::read_frame(p0.control_peer)) << "before the call has received all";
  in.call_received();
  auto ack = TestPath::read_frame(p0.control_peer);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->type, Frame::kAck);
  EXPECT_EQ(ack->offset, 2 * kBytes);
  in.call_received();
  EXPECT_FALSE(TestPath::read_frame(p0.control_peer)) << "an acknowledgement twice";

  // Carried back on a frame of this end already: no control frame.
  p0.send(0, 2 * kBytes, kBytes, 0, 0, /*lent=*/true);
  ASSERT_EQ(receive(in, at, kBytes), kBytes);
  acks.carried = acks.consumed;
  in.call_received();
  EXPECT_FALSE(TestPath::read_frame(p0.control_peer)) << "acknowledged twice";
}

}  // namespace
}  // namespace weft::transport::tcp
