#include "transport/ucx/pair.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/base/copy.hpp"
#include "src/base/process.hpp"

namespace weft::transport::ucx {
namespace {

// The first message each way: who sends it, so a link that reached the wrong rank says so,
// then the sender's mailbox card (none where it has no mailbox).
struct Hello {
  char magic[8];
  int32_t rank;
  int32_t peer;
};
constexpr char kMagic[8] = {'w', 'e', 'f', 't', 'u', 'c', 'x', '2'};
constexpr size_t kMostHello = 4096;
constexpr uint64_t kEveryTagBit = ~uint64_t{0};

// Touches every page now, so that no send or receive faults one in later.
std::unique_ptr<std::byte[]> touched(size_t bytes) {
  std::unique_ptr<std::byte[]> p(new std::byte[bytes]);
  std::memset(p.get(), 0, bytes);
  return p;
}

}  // namespace

UcxPair::UcxPair(std::shared_ptr<Worker> worker, const Options& options)
    : worker_(std::move(worker)),
      o_(options),
      ring_(touched(kSendRingBytes)),
      inbox_(touched(kMaxMessage)) {}

absl::StatusOr<std::unique_ptr<UcxPair>> UcxPair::open(std::shared_ptr<Worker> worker,
                                                       const std::string& peer_address,
                                                       const Options& options, Deadline deadline) {
  std::unique_ptr<UcxPair> p(new UcxPair(std::move(worker), options));
  Worker::Hold hold(*p->worker_);  // let go before p, should p go on an error
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  // UCX's shared-memory transports cannot report a peer's failure, and UCX refuses them an
  // endpoint that asks it to; on one host weft asks the kernel whether the peer still runs
  // (check_peer) and leaves UCX free to use shared memory and CMA.
  params.err_mode = options.same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  p->endpoint_failure_ = p->worker_->endpoint_failure();
  params.err_handler = {&EndpointFailure::on_error, p->endpoint_failure_};
  if (ucs_status_t s = ucp_ep_create(p->worker_->get(), &params, &p->ep_); s != UCS_OK) {
    p->ep_ = nullptr;
    return ucx_error(s, absl::StrCat("rank ", options.self, " creating a UCX endpoint to rank ",
                                     options.peer));
  }
  if (options.same_host) {
    // Without one (UCX could not map the region) the link keeps to tagged messages.
    if (auto m = Mailbox::create(p->worker_->context()); m.ok()) p->mailbox_ = *std::move(m);
  }
  Hello hello{};
  std::memcpy(hello.magic, kMagic, sizeof kMagic);
  hello.rank = options.self, hello.peer = options.peer;
  std::string message(reinterpret_cast<const char*>(&hello), sizeof hello);
  if (p->mailbox_ != nullptr) message += p->mailbox_->card();
  auto sent = p->stage(reinterpret_cast<const std::byte*>(message.data()), message.size(),
                       /*more=*/false);
  if (!sent.ok()) return sent.status();
  if (*sent != message.size()) return absl::InternalError("the ucx hello did not fit its ring");
  p->sent_ = 0;  // the hello is not of the stream
  if (options.self < options.peer) return p;
  Backoff backoff;
  while (p->hello_pending_) {
    p->worker_->progress();
    if (auto next = p->next_message(); !next.ok()) return next.status();
    if (!p->hello_pending_) break;
    if (auto s = p->check_peer_locked(); !s.ok()) return s;
    if (deadline.expired()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", options.self, " waited for rank ", options.peer,
          " to open its ucx link until the deadline (is rank ", options.peer, " running?)"));
    }
    backoff.pause();
  }
  return p;
}

UcxPair::~UcxPair() {
  if (ep_ == nullptr) return;
  Worker::Hold hold(*worker_);
  // A zero-length message after the last bytes tells the peer's receives the link closed, and
  // one at the offset kept for it tells its check_peer, wherever its stream is (a side that
  // only sends, or has bytes of this side's still to read): its next wait fails at once
  // instead of at its deadline.
  const bool healthy = usable().ok();
  if (healthy && post_pending().ok()) {
    (void)post(nullptr, 0, allocated_);
    ucp_request_param_t notice{};
    notice.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;
    void* r = ucp_tag_send_nbx(ep_, nullptr, 0, o_.tag_out | kClosedOffset, &notice);
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);  // the close below flushes it
  }
  worker_->not_holding(this);
  receive_unread();
  mailbox_.reset();  // its key was unpacked on the endpoint, and goes first
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = healthy ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
  void* closing = ucp_ep_close_nbx(ep_, &param);
  // A flush waits for the peer to take what is under way; it gets a second, then UCX is
  // told to let go.
  const Deadline deadline = Deadline::after(absl::Seconds(1));
  while (UCS_PTR_IS_PTR(closing) && ucp_request_check_status(closing) == UCS_INPROGRESS &&
         !deadline.expired() && !worker_->stopped()) {
    worker_->progress_once();
  }
  if (UCS_PTR_IS_PTR(closing)) ucp_request_free(closing);
  // Requests still held complete (or are cancelled) with the endpoint; none may outlive
  // the buffers they point into. A send the peer never took within the close's second (a
  // peer stopped, not gone) is neither, and UCX would read it from the ring or the caller's
  // buffer, both gone by then, whenever the peer went on: the worker stops instead.
  if (sends_.under_way() || offered_.under_way()) worker_->stop_progress();
  sends_.cancel_all(worker_->get());
  offered_.cancel_all(worker_->get());
  worker_->progress();
}

void UcxPair::receive_unread() {
  if (worker_->stopped()) return;  // nothing more lands (abandon)
  // A sender that is gone gets a moment, then its rendezvous is dropped.
  const Deadline deadline = Deadline::after(absl::Milliseconds(200));
  worker_->progress();  // what has come, matched while the endpoint stands
  for (int i = 0; i < 1024 && !deadline.expired(); ++i) {
    ucp_tag_message_h message = std::exchange(probed_, nullptr);
    size_t len = probed_len_;
    if (message == nullptr) {
      ucp_tag_recv_info_t info{};
      message = ucp_tag_probe_nb(worker_->get(), o_.tag_in, ~kTagOffsetBits, 1, &info);
      if (message == nullptr) return;
      len = info.length;
    }
    worker_->drop(message, inbox_.get(), std::min(len, kMaxMessage), deadline);
  }
}

// ---- failure ----

absl::Status UcxPair::fail(absl::Status cause) {
  if (failed_.ok()) {
    errors_.add(1);
    failed_ = absl::Status(cause.code(), absl::StrCat("ucx link rank ", o_.self, " -> rank ",
                                                      o_.peer, " failed: ", cause.message()));
  }
  return failed_;
}

absl::Status UcxPair::failure(const char* what, ucs_status_t status) {
  return fail(ucx_error(status, what));
}

absl::Status UcxPair::usable() {
  if (!failed_.ok()) return failed_;
  if (worker_->stopped()) {
    return fail(absl::UnavailableError(
        "UCX could not end a message that stalled (a receive given up on, or a send a closed "
        "link left under way), on this or another link of the communicator, and is stopped so "
        "that it touches no buffer handed back: make a new communicator"));
  }
  if (const int status = endpoint_failure_->status.load(std::memory_order_acquire);
      status != UCS_OK) {
    return failure("the endpoint failed (the peer is gone or the network between failed)",
                   static_cast<ucs_status_t>(status));
  }
  return absl::OkStatus();
}

absl::Status UcxPair::check_peer() {
  Worker::Hold hold(*worker_);
  return check_peer_locked();
}

absl::Status UcxPair::check_peer_locked() {
  if (auto s = post_pending(); !s.ok()) return s;
  worker_->progress();
  if (auto s = usable(); !s.ok()) return s;
  // As shm's closed flags: the peer closed, and nothing it sent is left to receive. Before
  // its hello is read the link is of no use either way (its mailbox may be gone, below).
  if (peer_closed_ || (peer_sent_closed() && !readable())) {
    return fail(absl::UnavailableError("the peer closed the link"));
  }
  // What a process sent before it exited is still the caller's: a receive that found nothing
  // may have run just before its last bytes came.
  if (o_.same_host && !process_alive(o_.peer_pid) && !readable()) {
    return fail(absl::UnavailableError(absl::StrCat("its process (pid ", o_.peer_pid, ") is gone")));
  }
  return absl::OkStatus();
}

bool UcxPair::readable() const {
  if (inbox_at_ < inbox_len_ || probed_ != nullptr || packet_part_ > 0 || packet_next()) {
    return true;
  }
  ucp_tag_recv_info_t info{};
  return ucp_tag_probe_nb(worker_->get(), tag_at(landed_), kEveryTagBit, 0, &info) != nullptr &&
         info.length > 0;
}

bool UcxPair::peer_sent_closed() const {
  ucp_tag_recv_info_t info{};
  return ucp_tag_probe_nb(worker_->get(), tag_at(kClosedOffset), kEveryTagBit, 0, &info) !=
             nullptr &&
         info.length == 0;
}

// ---- receiving ----

absl::Status UcxPair::wait(void* request, const char* what) {
  if (request == nullptr) return absl::OkStatus();
  if (UCS_PTR_IS_ERR(request)) return failure(what, UCS_PTR_STATUS(request));
  const Deadline deadline = Deadline::after(absl::Milliseconds(o_.stall_ms));
  Backoff backoff;
  ucs_status_t s;
  while ((s = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    if (worker_->progress_once()) {
      backoff.reset();
      continue;
    }
    if (deadline.expired() || !usable().ok()) {
      abandon(request);
      if (!failed_.ok()) return failed_;
      return fail(absl::DeadlineExceededError(absl::StrCat(
          what, " stalled for ", o_.stall_ms, " ms (WEFT_PATH_TIMEOUT_MS) after it began")));
    }
    backoff.pause();
  }
  ucp_request_free(request);
  if (s != UCS_OK) return failure(what, s);
  return absl::OkStatus();
}

// ucp_request_cancel stops only a receive not yet matched, and each of ours was matched
// (probed) before it was posted: a rendezvous that has begun goes on writing into its buffer
// whenever the worker progresses, after the caller has that buffer back (a sender that
// stalled, then went on). Closing the endpoint, even by force, does not end it (UCX 1.13).
// So the worker is never progressed again, and the link fails; so does every other link on
// the worker, at its next wait.
void UcxPair::abandon(void* request) {
  ucp_request_cancel(worker_->get(), request);
  if (ucp_request_check_status(request) == UCS_INPROGRESS) worker_->stop_progress();
  ucp_request_free(request);  // UCX releases it if it ever completes
}

absl::Status UcxPair::land(std::byte* dst, size_t len) {
  ucp_request_param_t param{};
  ucp_tag_message_h msg = probed_;
  probed_ = nullptr;
  void* r = ucp_tag_msg_recv_nbx(worker_->get(), dst, len, msg, &param);
  return wait(r, "receiving a message");
}

absl::StatusOr<std::optional<size_t>> UcxPair::next_message() {
  for (;;) {
    if (probed_ != nullptr) return std::optional<size_t>(probed_len_);
    if (peer_closed_) return std::optional<size_t>();
    // The message that starts where this side is in the stream, if a message does (it may
    // be a packet): its tag says so. The hello, the first message, has offset 0 too.
    ucp_tag_recv_info_t info{};
    probed_ = ucp_tag_probe_nb(worker_->get(), tag_at(landed_), kEveryTagBit, 1, &info);
    if (probed_ == nullptr) return std::optional<size_t>();
    probed_len_ = info.length;
    if (hello_pending_) {
      if (auto s = read_hello(); !s.ok()) return s;
      continue;
    }
    if (probed_len_ > 0) return std::optional<size_t>(probed_len_);
    // The peer closed the link after its last bytes.
    if (auto s = land(nullptr, 0); !s.ok()) return s;
    peer_closed_ = true;
  }
}

absl::Status UcxPair::hear_hello() {
  if (!failed_.ok()) return absl::OkStatus();  // the send reports the link's failure
  // Called only until the hello has come: the higher rank sent it when it opened the link.
  worker_->progress();
  auto next = next_message();  // a message after the hello is left probed for the receive
  return next.ok() ? absl::OkStatus() : next.status();
}

absl::Status UcxPair::read_hello() {
  Hello hello{};
  if (probed_len_ < sizeof hello || probed_len_ > kMostHello) {
    return fail(absl::DataLossError(absl::StrCat("its first message has ", probed_len_,
                                                 " bytes, not a hello")));
  }
  std::string message(probed_len_, '\0');
  if (auto s = land(reinterpret_cast<std::byte*>(message.data()), message.size()); !s.ok()) {
    return s;
  }
  std::memcpy(&hello, message.data(), sizeof hello);
  if (std::memcmp(hello.magic, kMagic, sizeof kMagic) != 0 || hello.rank != o_.peer ||
      hello.peer != o_.self) {
    return fail(absl::DataLossError(absl::StrCat(
        "its hello came from rank ", hello.rank, " for rank ", hello.peer,
        " (a rank of another job with the same secret, or another weft version?)")));
  }
  if (mailbox_ == nullptr) {
    hello_pending_ = false;
    return absl::OkStatus();
  }
  // The peer's mailbox goes with its end of the link, and UCX 1.13 crashes unpacking a key
  // whose region is gone (its error path releases what it never made): a lower rank reads
  // the hello with its first receive, which may come after the peer closed or died. Then
  // nothing is written there again, but what the peer sent before it went is still read: its
  // packets lie in this side's own mailbox, its messages in UCX's queue.
  hello_pending_ = false;
  if (auto s = post_pending(); !s.ok()) return s;
  worker_->progress();
  if (!usable().ok() || peer_sent_closed() ||
      (o_.same_host && !process_alive(o_.peer_pid))) {
    return absl::OkStatus();  // sends find the link failed; receives take what is left
  }
  auto reached = mailbox_->reach(ep_, std::string_view(message).substr(sizeof hello));
  if (!reached.ok()) return fail(reached.status());
  packets_out_ = *reached;
  return absl::OkStatus();
}

absl::StatusOr<bool> UcxPair::take_packet(const Mailbox::Packet& p, size_t room,
                                          HandOver hand_over, size_t* got) {
  if (!mailbox_->valid(p)) {
    return fail(absl::DataLossError(absl::StrCat(
        "a packet in its mailbox says it has ", p.len, " bytes at bulk ", p.bulk_at)));
  }
  if (Mailbox::in_bulk(p)) {
    // Handed over from the bulk ring, where the writer leaves it until it is consumed: as
    // much as the caller wants now, the rest on its next receive.
    const size_t n = std::min(p.len - packet_part_, room);
    if (const size_t rest = p.len - packet_part_ - n; rest > 0) {
      // The rest's first lines cross from the writer's core while the caller reads this part
      // (a 2-rank 2 KiB allgather, 4 rounds: 0.52 us without, 0.47 with, against 0.45 when
      // every such packet was first copied whole into the receive buffer).
      const std::byte* next = mailbox_->bulk_bytes(p, packet_part_ + n);
      const size_t ask = std::min(rest, kPrefetchRestBytes);
      for (size_t i = 0; i < ask; i += 64) __builtin_prefetch(next + i);
    }
    hand_over(mailbox_->bulk_bytes(p, packet_part_), n, *got);
    *got += n;
    landed_ += n;
    packet_part_ += n;
    if (packet_part_ == p.len) {
      mailbox_->consume_bulk(p);
      packet_part_ = 0;
    }
    return true;
  }
  std::byte scratch[Mailbox::kGatherBytes];
  const std::byte* data = mailbox_->take(p, scratch);
  if (data == nullptr) return false;  // still landing
  if (p.len <= room) {  // all of it wanted: handed over from the mailbox itself
    hand_over(data, p.len, *got);
    *got += p.len;
  } else {
    copy_bytes(inbox_.get(), data, p.len);
    inbox_at_ = 0, inbox_len_ = p.len;
  }
  landed_ += p.len;
  return true;
}

std::optional<Mailbox::Packet> UcxPair::packet_next() const {
  if (mailbox_ == nullptr || hello_pending_) return std::nullopt;
  std::optional<Mailbox::Packet> p = mailbox_->peek();
  if (p && p->offset != packet_start()) p.reset();
  return p;
}

absl::StatusOr<size_t> UcxPair::recv_scatter(const Scatter& to, size_t max) {
  return receive(max, &to, [&](const std::byte* data, size_t n, size_t at) {
    for (size_t done = 0; done < n;) {
      const size_t run = std::min(n - done, to.run_from(at + done));
      copy_bytes(to.at(at + done), data + done, run);
      done += run;
    }
  });
}

absl::StatusOr<size_t> UcxPair::recv_some(size_t max, Sink sink) {
  return receive(max, nullptr, [&](const std::byte* data, size_t n, size_t) { sink(data, n); });
}

absl::StatusOr<size_t> UcxPair::receive(size_t max, const Scatter* direct, HandOver hand_over) {
  Worker::Hold hold(*worker_);
  // A failed link hands nothing over: a message it refused (a bad hello) stays probed.
  if (!failed_.ok()) return failed_;
  if (auto s = post_pending(); !s.ok()) return s;  // a wait never keeps held bytes back
  // A packet the caller wants whole (a small call's state and data), straight to its places:
  // the loop below, the hand-over through a function reference and a second look at the tag
  // cost a 2-rank 64-byte allgather over 200 of its 1,600 instructions a call. Not the rest
  // of a bulk packet partly handed over (packet_part_), which take_whole would take whole.
  if (direct != nullptr && inbox_at_ == inbox_len_ && probed_ == nullptr && packet_part_ == 0 &&
      mailbox_ != nullptr && !hello_pending_) {
    std::byte scratch[Mailbox::kGatherBytes];
    size_t n = 0;
    if (const std::byte* data = mailbox_->take_whole(packet_start(), max, scratch, &n)) {
      direct->copy_in(data, 0, n);
      landed_ += n;
      bytes_received_.add(n);
      mailbox_->publish(landed_);
      return n;
    }
  }
  std::optional<Mailbox::Packet> packet;
  if (inbox_at_ == inbox_len_ && probed_ == nullptr && !(packet = packet_next())) {
    worker_->progress_once();
  }
  size_t got = 0;
  // At most about one large message a receive: the caller's own sends wait meanwhile. Two
  // ranks trading large blocks otherwise took turns, each reading the whole of the other's
  // block as it was posted, and posting its own only after.
  while (got < max && got < kMaxMessage) {
    if (inbox_at_ < inbox_len_) {
      const size_t n = std::min(inbox_len_ - inbox_at_, max - got);
      hand_over(inbox_.get() + inbox_at_, n, got);
      inbox_at_ += n, got += n;
      continue;
    }
    if (packet || (packet = packet_next())) {
      auto took = take_packet(*packet, max - got, hand_over, &got);
      packet.reset();
      if (!took.ok()) return took.status();
      if (*took) continue;
    }
    auto next = next_message();
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    const size_t len = **next;
    if (len > kMaxMessage) {  // no weft sender makes one: the receive buffer's size
      return fail(absl::DataLossError(absl::StrCat(
          "a message of ", len, " bytes, more than the ", kMaxMessage,
          " a sender sends at once: the stream is out of step (another weft version?)")));
    }
    if (direct != nullptr && len <= max - got && len <= direct->run_from(got)) {
      if (auto s = land(direct->at(got), len); !s.ok()) return s;
      got += len;
    } else {
      if (auto s = land(inbox_.get(), len); !s.ok()) return s;
      inbox_at_ = 0, inbox_len_ = len;
    }
    landed_ += len;
  }
  bytes_received_.add(got);
  if (mailbox_ != nullptr && got > 0) mailbox_->publish(landed_);
  if (got == 0 && max > 0) {
    if (auto s = usable(); !s.ok()) return s;
    if (peer_closed_) return fail(absl::UnavailableError("the peer closed the link"));
  }
  return got;
}

PairStats UcxPair::stats() const {
  PairStats s;
  s.bytes_sent = bytes_sent_.get();
  s.bytes_received = bytes_received_.get();
  s.errors = errors_.get();
  return s;
}

}  // namespace weft::transport::ucx
