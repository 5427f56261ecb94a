// The sending half of a tcp link (transport/tcp/outbound.hpp), its frames read by hand: what
// it puts in one frame, and what its headers say.
#include "transport/tcp/outbound.hpp"

#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/tcp_test_path.hpp"
#include "transport/tcp/frame.hpp"

namespace weft::transport::tcp {
namespace {

std::vector<std::byte> bytes(size_t len, uint8_t first) {
  std::vector<std::byte> out(len);
  for (size_t k = 0; k < len; ++k) out[k] = std::byte{static_cast<uint8_t>(first + k % 251)};
  return out;
}

struct Sender {
  TestPath path{0};
  LinkEvents events{0, 1, "test"};
  RidingAcks acks;
  Outbound out{{path.data.get()}, {path.control.get()}, /*checksum=*/false, LinkFaults{},
               &events, &acks};
  std::vector<std::byte> stream;  ///< what the test's end of the data socket read so far

  /// Hands `data` over (lent or copied) until all is taken, reading the socket as it goes.
  void take_all(const std::vector<std::byte>& data, bool lend) {
    size_t taken = 0;
    for (int tries = 0; taken < data.size() && tries < 1000; ++tries) {
      auto n = lend ? out.lend(data.data() + taken, data.size() - taken, 0)
                    : out.send(data.data() + taken, data.size() - taken, 0);
      ASSERT_TRUE(n.ok()) << n.status();
      taken += *n;
      path.drain(stream);
    }
    ASSERT_EQ(taken, data.size());
    for (int tries = 0; out.owes() && tries < 1000; ++tries) {
      ASSERT_TRUE(out.tend().ok());
      path.drain(stream);
    }
  }
};

// A call check's state sent with MSG_MORE (Pair::send_some_more) and its data right after
// leave as one frame: one system call and one header, not two.
TEST(TcpOutbound, BytesFollowedAtOnceLeaveInOneFrameWithWhatFollows) {
  Sender s;
  const auto state = bytes(24, 1), data = bytes(32 << 10, 7);
  auto n = s.out.send(state.data(), state.size(), MSG_MORE);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, state.size()) << "held bytes count as taken";
  s.path.drain(s.stream);
  EXPECT_TRUE(s.stream.empty()) << "held, not sent";
  s.take_all(data, /*lend=*/false);
  auto frames = TestPath::frames(s.stream);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].first.offset, 0u);
  ASSERT_EQ(frames[0].second.size(), state.size() + data.size());
  EXPECT_EQ(std::memcmp(frames[0].second.data(), state.data(), state.size()), 0);
  EXPECT_EQ(std::memcmp(frames[0].second.data() + state.size(), data.data(), data.size()), 0);

  // Nothing follows: the held bytes leave with the next tend().
  n = s.out.send(state.data(), state.size(), MSG_MORE);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(s.out.owes());
  ASSERT_TRUE(s.out.tend().ok());
  s.path.drain(s.stream);
  frames = TestPath::frames(s.stream);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].first.offset, state.size() + data.size());
  EXPECT_EQ(frames[1].second, state);
}

// Frames whose payload lies in the caller's buffer say so, so that the receiver acknowledges
// them when its call has received them; frames of copied bytes do not.
TEST(TcpOutbound, FramesOfLentBytesSaySo) {
  Sender s;
  const auto state = bytes(24, 3), lent = bytes(256 << 10, 5);
  auto n = s.out.send(state.data(), state.size(), MSG_MORE);
  ASSERT_TRUE(n.ok()) << n.status();
  s.take_all(lent, /*lend=*/true);
  std::vector<std::byte> got;
  for (const auto& [f, payload] : TestPath::frames(s.stream)) {
    EXPECT_TRUE(f.lent) << "at " << f.offset;
    EXPECT_EQ(f.offset, got.size());
    got.insert(got.end(), payload.begin(), payload.end());
  }
  ASSERT_EQ(got.size(), state.size() + lent.size());
  EXPECT_EQ(std::memcmp(got.data(), state.data(), state.size()), 0);
  EXPECT_EQ(std::memcmp(got.data() + state.size(), lent.data(), lent.size()), 0)
      << "the state held back and the lent bytes behind it";
  s.out.call_ends();
  s.stream.clear();
  s.take_all(state, /*lend=*/false);
  auto frames = TestPath::frames(s.stream);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_FALSE(frames[0].first.lent);
}

}  // namespace
}  // namespace weft::transport::tcp
