// The ucx transport's own behaviour on one host, beside the conformance suite that runs over
// it (transport_test.cc): which side writes into the peer's mailbox, what goes by rendezvous,
// and a message no weft sender makes (longer than the receive buffer) failing the link
// cleanly. Loopback only; every wait is bounded.
#ifdef WEFT_HAVE_UCX

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/scoped_env.hpp"
#include "tests/unit/transport_harness.hpp"
#include "transport/ucx/address.hpp"
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

// Two ranks over UCX's tcp, whose messages stall for at most `path_timeout_ms`.
Ranks ranks_over_ucx_tcp(int path_timeout_ms, uint64_t job = random_seed()) {
  return make_ranks(TransportCase{"ucx_tcp", "ucx", ucx_over("tcp"), false}, 2, job, kTestSecret,
                    [=](TransportInit& init) { init.path_timeout_ms = path_timeout_ms; });
}

// Links ranks 0 (a) and 1 (b) and moves one byte from b to a, so that each side has heard
// the other's hello.
void connect_and_greet(Ranks& r, std::unique_ptr<Pair>& a, std::unique_ptr<Pair>& b) {
  ASSERT_EQ(r.transports.size(), 2u);
  ASSERT_TRUE(connect_pair(r, 0, 1, a, b));
  const std::byte one{1};
  std::byte heard{};
  ASSERT_EQ(pump(1, [&](size_t) { return b->send_some(&one, 1); },
                 [&](size_t) { return a->recv_into(&heard, 1); }),
            1u);
}

// Drives `p`'s side for `how_long`, as its caller would between calls.
void drive(Pair& p, absl::Duration how_long) {
  const Deadline deadline = Deadline::after(how_long);
  while (!deadline.expired()) {
    (void)p.check_peer();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// A UCX worker of its own, outside weft, speaking on a link's tag: what a peer of another
// version, or a corrupted one, might send.
class RogueWorker {
 public:
  explicit RogueWorker(const std::string& address) {
    const weft::testing::ScopedEnv env("UCX_TLS", "tcp");
    ucp_config_t* config = nullptr;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    EXPECT_EQ(ucp_init(&params, config, &context_), UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t worker{};
    EXPECT_EQ(ucp_worker_create(context_, &worker, &worker_), UCS_OK);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    EXPECT_EQ(ucp_ep_create(worker_, &ep, &ep_), UCS_OK);
  }
  ~RogueWorker() {
    stop_.store(true);
    if (progress_.joinable()) progress_.join();
    if (UCS_PTR_IS_PTR(request_)) ucp_request_free(request_);
    void* closing = ucp_ep_close_nb(ep_, UCP_EP_CLOSE_MODE_FORCE);
    for (int i = 0; i < 100000 && UCS_PTR_IS_PTR(closing) &&
                    ucp_request_check_status(closing) == UCS_INPROGRESS;
         ++i) {
      ucp_worker_progress(worker_);
    }
    if (UCS_PTR_IS_PTR(closing)) ucp_request_free(closing);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }
  /// Sends `bytes` under `tag` (once), then drives the worker from a thread of its own until
  /// destroyed.
  void send(const std::vector<std::byte>& bytes, uint64_t tag) {
    ucp_request_param_t param{};
    request_ = ucp_tag_send_nbx(ep_, bytes.data(), bytes.size(), tag, &param);
    progress_ = std::thread([this] {
      while (!stop_.load()) ucp_worker_progress(worker_);
    });
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  void* request_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

// weft never sends a message longer than UcxPair::kMaxMessage, its receive buffer's size. One
// that claims more (a corrupted peer, another version) fails the link with a clear error
// rather than landing past the buffer's end.
TEST(UcxLinkTest, AMessageLongerThanTheReceiveBufferFailsTheLink) {
  const uint64_t job = random_seed();
  Ranks r = ranks_over_ucx_tcp(TransportInit().path_timeout_ms, job);
  std::unique_ptr<Pair> a, b;
  ASSERT_NO_FATAL_FAILURE(connect_and_greet(r, a, b));
  const std::vector<std::byte> big(ucx::UcxPair::kMaxMessage + (2 << 20), std::byte{0x5a});
  auto rogue = std::make_unique<RogueWorker>(r.transports[0]->address());
  rogue->send(big, ucx::link_tag(kTestSecret, job, 1, 0) | 1);  // where b's stream goes on
  absl::Status seen;
  const Deadline deadline = Deadline::after(absl::Seconds(10));
  size_t got = 0;
  for (int i = 0; i < 1000000 && seen.ok() && !deadline.expired(); ++i) {
    auto n = a->recv_some(size_t{8} << 20, [&](const std::byte*, size_t k) { got += k; });
    if (!n.ok()) seen = n.status();
  }
  EXPECT_EQ(got, 0u);
  EXPECT_EQ(seen.code(), absl::StatusCode::kDataLoss) << seen;
  EXPECT_NE(seen.message().find("out of step"), std::string::npos) << seen;
  // The links go first: UCX's endpoints to the rogue live on their workers.
  a.reset();
  b.reset();
  rogue.reset();
}

// A message matched by the receiver whose sender then stops (a stopped process; a partition
// under RDMA) fails the receive at the path timeout. The caller's buffer is the caller's again
// once the call failed: what the sender pushes when it goes on must not land there.
TEST(UcxLinkTest, AStalledRendezvousWritesNothingAfterTheReceiveGaveUp) {
  Ranks r = ranks_over_ucx_tcp(/*path_timeout_ms=*/300);
  std::unique_ptr<Pair> a, b;
  ASSERT_NO_FATAL_FAILURE(connect_and_greet(r, a, b));
  auto* sender = dynamic_cast<ucx::UcxPair*>(b.get());
  ASSERT_NE(sender, nullptr);
  const auto msg = make_message(7, ucx::UcxPair::kMaxMessage);
  std::vector<std::byte> got(msg.size());
  auto offered = b->offer_some(msg.data(), msg.size());  // one message, by rendezvous
  ASSERT_TRUE(offered.ok()) << offered.status();
  absl::Status seen;
  for (int i = 0; i < 5000 && seen.ok(); ++i) {
    (void)b->check_peer();  // the offer's announcement leaves, in a round trip or two
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    // While the receiver looks, the sending side does nothing: once the receiver has matched
    // the message, nothing moves until its wait gives up.
    ucx::Worker::Hold stopped(sender->worker());
    auto n = a->recv_into(got.data(), got.size());
    if (!n.ok()) {
      seen = n.status();
    } else {
      ASSERT_EQ(*n, 0u) << "the message arrived with its sender stopped";
    }
  }
  ASSERT_EQ(seen.code(), absl::StatusCode::kDeadlineExceeded) << seen;
  std::fill(got.begin(), got.end(), std::byte{0});
  drive(*b, absl::Milliseconds(500));  // the sender goes on, and answers the request to send
  EXPECT_EQ(std::count(got.begin(), got.end(), std::byte{0}), static_cast<ptrdiff_t>(got.size()))
      << "bytes landed in the buffer of a receive that had failed";
  // The link stays failed, and says why.
  auto again = a->recv_into(got.data(), got.size());
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("stalled"), std::string::npos) << again.status();
  a.reset();
  b.reset();
}

// The mirror image: a link closed while a message it sends by rendezvous waits for a peer
// that stopped. The caller's buffer is the caller's again once the link is gone; when the peer
// goes on and asks for the message, nothing may be read from that buffer for it.
TEST(UcxLinkTest, ALinkClosedBeforeAStoppedPeerTookItsMessageSendsNothingAfter) {
  Ranks r = ranks_over_ucx_tcp(/*path_timeout_ms=*/300);
  std::unique_ptr<Pair> a, b;
  ASSERT_NO_FATAL_FAILURE(connect_and_greet(r, a, b));
  auto* receiver = dynamic_cast<ucx::UcxPair*>(a.get());
  ASSERT_NE(receiver, nullptr);
  std::vector<std::byte> msg = make_message(9, ucx::UcxPair::kMaxMessage);
  auto offered = b->offer_some(msg.data(), msg.size());  // one message, by rendezvous
  ASSERT_TRUE(offered.ok()) << offered.status();
  ASSERT_EQ(*offered, 0u);
  // Its announcement leaves, in a round trip or two; the receiver takes it only when asked.
  drive(*b, absl::Milliseconds(100));
  {
    ucx::Worker::Hold stopped(receiver->worker());  // the receiving side does nothing
    b.reset();  // gives its peer a second to take what is under way
  }
  std::fill(msg.begin(), msg.end(), std::byte{0xee});  // the caller's buffer, used again
  std::vector<std::byte> got(msg.size());
  size_t arrived = 0;
  const Deadline deadline = Deadline::after(absl::Seconds(2));
  while (!deadline.expired()) {
    auto n = a->recv_into(got.data() + arrived, got.size() - arrived);
    if (!n.ok()) break;  // the receive gave up: the sender never sent
    arrived += *n;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(std::count(got.begin(), got.end(), std::byte{0xee}), 0)
      << "the closed link sent bytes from its caller's buffer after it was gone";
  a.reset();
}

}  // namespace
}  // namespace weft::transport

#endif  // WEFT_HAVE_UCX
