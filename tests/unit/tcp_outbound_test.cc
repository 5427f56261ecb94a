// The sending half of a tcp link (transport/tcp/outbound.hpp), its frames read by hand: what
// it puts in one frame, what its headers say, and a frame left half written on a rail that dies.
#include "transport/tcp/outbound.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
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

// A link over `rails` test paths, driven by hand: what it writes is read back and
// acknowledged, so its ring moves on and wraps.
struct Link {
  std::vector<std::unique_ptr<TestPath>> paths;
  LinkEvents events{0, 1, "test"};
  RidingAcks acks;
  std::unique_ptr<Outbound> out;
  std::vector<std::vector<std::byte>> streams;  ///< what each data socket carried so far

  explicit Link(int rails) : streams(rails) {
    std::vector<Path*> data, control;
    for (int i = 0; i < rails; ++i) {
      paths.push_back(std::make_unique<TestPath>(i));
      data.push_back(paths.back()->data.get());
      control.push_back(paths.back()->control.get());
    }
    out = std::make_unique<Outbound>(data, control, /*checksum=*/false, LinkFaults{}, &events,
                                     &acks);
  }

  void drain() {
    for (size_t i = 0; i < paths.size(); ++i) paths[i]->drain(streams[i]);
  }
  /// Acknowledges everything before `offset` on rail 0's control socket.
  void acknowledge(uint64_t offset) const {
    Frame ack;
    ack.type = Frame::kAck;
    ack.offset = offset;
    std::byte wire[kFrameHeaderBytes];
    encode_frame(ack, wire);
    ASSERT_EQ(::write(paths[0]->control_peer, wire, sizeof wire), ssize_t{sizeof wire});
  }
  /// Hands `data` over until all is taken, reading and acknowledging as the peer would, then
  /// lets the link send what it still owes.
  void take_all(const std::vector<std::byte>& data, bool lend) {
    size_t done = 0;
    for (int tries = 0; done < data.size() && tries < 10000; ++tries) {
      auto n = lend ? out->lend(data.data() + done, data.size() - done, 0)
                    : out->send(data.data() + done, data.size() - done, 0);
      ASSERT_TRUE(n.ok()) << n.status();
      done += *n;
      drain();
      acknowledge(received());
    }
    ASSERT_EQ(done, data.size());
    for (int tries = 0; out->owes() && tries < 1000; ++tries) {
      ASSERT_TRUE(out->tend().ok());
      drain();
    }
  }
  /// The stream's bytes every rail carried, put together by offset.
  std::vector<std::byte> stream() const {
    std::vector<std::pair<Frame, std::vector<std::byte>>> all;
    for (const auto& s : streams) {
      auto f = TestPath::frames(s);
      all.insert(all.end(), f.begin(), f.end());
    }
    std::sort(all.begin(), all.end(),
              [](const auto& a, const auto& b) { return a.first.offset < b.first.offset; });
    std::vector<std::byte> out;
    for (const auto& [f, payload] : all) {
      EXPECT_EQ(f.offset, out.size()) << "a gap or an overlap";
      out.insert(out.end(), payload.begin(), payload.end());
    }
    return out;
  }
  uint64_t received() const { return stream().size(); }
};

// A call check's state sent with MSG_MORE (Pair::send_some_more) and its data right after
// leave as one frame: one system call and one header, not two.
TEST(TcpOutbound, BytesFollowedAtOnceLeaveInOneFrameWithWhatFollows) {
  Link s(1);
  const auto state = bytes(24, 1), data = bytes(32 << 10, 7);
  auto n = s.out->send(state.data(), state.size(), MSG_MORE);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, state.size()) << "held bytes count as taken";
  s.drain();
  EXPECT_TRUE(s.streams[0].empty()) << "held, not sent";
  s.take_all(data, /*lend=*/false);
  auto frames = TestPath::frames(s.streams[0]);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].first.offset, 0u);
  ASSERT_EQ(frames[0].second.size(), state.size() + data.size());
  EXPECT_EQ(std::memcmp(frames[0].second.data(), state.data(), state.size()), 0);
  EXPECT_EQ(std::memcmp(frames[0].second.data() + state.size(), data.data(), data.size()), 0);

  // Nothing follows: the held bytes leave when the caller waits (tend(), or a receive that
  // finds nothing: send_held()).
  n = s.out->send(state.data(), state.size(), MSG_MORE);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(s.out->holds());
  s.drain();
  EXPECT_EQ(TestPath::frames(s.streams[0]).size(), 1u) << "held, not sent";
  ASSERT_TRUE(s.out->tend().ok());
  EXPECT_FALSE(s.out->holds());
  s.drain();
  frames = TestPath::frames(s.streams[0]);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].first.offset, state.size() + data.size());
  EXPECT_EQ(frames[1].second, state);
}

// Frames whose payload lies in the caller's buffer say so, so that the receiver acknowledges
// them when its call has received them; frames of copied bytes do not.
TEST(TcpOutbound, FramesOfLentBytesSaySo) {
  Link s(1);
  const auto state = bytes(24, 3), lent = bytes(256 << 10, 5);
  auto n = s.out->send(state.data(), state.size(), MSG_MORE);
  ASSERT_TRUE(n.ok()) << n.status();
  s.take_all(lent, /*lend=*/true);
  std::vector<std::byte> got;
  for (const auto& [f, payload] : TestPath::frames(s.streams[0])) {
    EXPECT_TRUE(f.lent) << "at " << f.offset;
    EXPECT_EQ(f.offset, got.size());
    got.insert(got.end(), payload.begin(), payload.end());
  }
  ASSERT_EQ(got.size(), state.size() + lent.size());
  EXPECT_EQ(std::memcmp(got.data(), state.data(), state.size()), 0);
  EXPECT_EQ(std::memcmp(got.data() + state.size(), lent.data(), lent.size()), 0)
      << "the state held back and the lent bytes behind it";
  s.out->call_ends();
  const size_t before = TestPath::frames(s.streams[0]).size();
  s.take_all(state, /*lend=*/false);
  auto frames = TestPath::frames(s.streams[0]);
  ASSERT_EQ(frames.size(), before + 1);
  EXPECT_FALSE(frames.back().first.lent);
}

// Held bytes that straddle the ring's end, and on two rails a stripe boundary, leave with the
// lent bytes behind them: a frame of two runs, one of them wrapping, or two frames on two
// sockets; every byte arrives once, in order.
TEST(TcpOutbound, HeldBytesAcrossTheRingsEndAndAStripeBoundaryArriveWhole) {
  for (int rails : {1, 2}) {
    SCOPED_TRACE(testing::Message() << rails << " rails");
    Link link(rails);
    const uint64_t ring_end = retain_bytes(rails);
    const auto filler = bytes(ring_end - 12, 11), state = bytes(24, 13), lent = bytes(96 << 10, 17);
    ASSERT_NO_FATAL_FAILURE(link.take_all(filler, /*lend=*/false));
    auto n = link.out->send(state.data(), state.size(), MSG_MORE);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_TRUE(link.out->holds());
    EXPECT_FALSE(link.out->owes()) << "held bytes are not owed until a send or a wait";
    ASSERT_NO_FATAL_FAILURE(link.take_all(lent, /*lend=*/true));
    EXPECT_FALSE(link.out->holds());
    link.out->call_ends();
    std::vector<std::byte> want = filler;
    want.insert(want.end(), state.begin(), state.end());
    want.insert(want.end(), lent.begin(), lent.end());
    const std::vector<std::byte> got = link.stream();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << "bytes changed";
    if (rails == 1) {
      // One frame from the state on: the ring's last 12 bytes, its first 12, the lent run.
      auto frames = TestPath::frames(link.streams[0]);
      ASSERT_FALSE(frames.empty());
      EXPECT_EQ(frames.back().first.offset, filler.size());
      EXPECT_EQ(frames.back().second.size(), state.size() + lent.size());
    }
  }
}

// Runs `step` on a thread of its own and fails (ending the process: a spinning thread cannot
// be joined) unless it returns within two seconds.
void returns_in_time(const std::function<void()>& step) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    step();
    done.store(true);
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!done.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!done.load()) {
    ADD_FAILURE() << "still writing to a dead socket after 2 s";
    std::fprintf(stderr, "a link half spins on a dead path: ending the test process\n");
    std::_Exit(1);
  }
  t.join();
}

// A frame half written when its rail stops carrying new frames is finished there (an orphan)
// to keep that socket's stream in step. When the rail then dies, the orphan can never be
// finished: it is dropped, and the link goes on without it, rather than writing to the dead
// socket for ever. Two ways to get there: the peer exits (its control socket ends first,
// then its data socket), and a detour onto an added path whose rail then times out.
TEST(TcpOutbound, AFrameLeftHalfWrittenOnARailThatDiesIsDropped) {
  {
    SCOPED_TRACE("the peer exits");
    Link link(2);
    const auto data = bytes(512 << 10, 19);  // more than rail 0's socket takes at once
    ASSERT_TRUE(link.out->send(data.data(), data.size(), 0).ok());
    ::close(link.paths[0]->control_peer);
    link.paths[0]->control_peer = -1;
    (void)link.out->tend();  // reads the control stream's end: rail 0 carries no new frame
    ::close(link.paths[0]->data_peer);
    link.paths[0]->data_peer = -1;
    returns_in_time([&] {
      for (int i = 0; i < 3; ++i) (void)link.out->tend();
    });
  }
  {
    SCOPED_TRACE("a detour, then its rail times out");
    Link link(2);
    TestPath added(2);
    link.out->add_path(added.data.get(), added.control.get(), "a test's relay");
    const auto data = bytes(512 << 10, 23);
    ASSERT_TRUE(link.out->send(data.data(), data.size(), 0).ok());
    link.out->detour(true);  // the frame under way on a rail becomes an orphan
    link.paths[0]->data->kill("test: rail 0 timed out");
    returns_in_time([&] { (void)link.out->tend(); });
    EXPECT_TRUE(link.out->failed().ok()) << link.out->failed();
  }
}

}  // namespace
}  // namespace weft::transport::tcp
