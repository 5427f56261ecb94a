// A ucx link's sending half (pair.hpp says how it sends): the ring the copied sends leave
// from, the bytes held back for the next send, and offers of the caller's own buffer.
#include "transport/ucx/pair.hpp"

#include "src/base/copy.hpp"

namespace weft::transport::ucx {

absl::Status UcxPair::reclaim() {
  const ucs_status_t s = sends_.reap([&](uint64_t upto) { freed_ = upto; });
  return s == UCS_OK ? absl::OkStatus() : failure("a send failed", s);
}

absl::Status UcxPair::post(const std::byte* data, size_t len, uint64_t ring_end) {
  // stage() leaves a slot for every message it starts; only the goodbye may find none.
  if (sends_.full()) return absl::ResourceExhaustedError("every send slot in use");
  if (len > 0 && packet_fits(len, /*offered=*/false)) {
    write_packet(Gather{data, len, nullptr}, len, ring_end);
    return absl::OkStatus();
  }
  const uint64_t offset = sent_;
  sent_ += len;
  ucp_request_param_t param{};
  if (len <= kEagerUpTo) param.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;
  void* r = ucp_tag_send_nbx(ep_, data, len, o_.tag_out | (offset & kTagOffsetBits), &param);
  if (UCS_PTR_IS_ERR(r)) return failure("posting a send", UCS_PTR_STATUS(r));
  sends_.add(r, ring_end, [&](uint64_t upto) { freed_ = upto; });
  return absl::OkStatus();
}

void UcxPair::write_packet(const Gather& from, size_t len, uint64_t ring_end) {
  mailbox_->write(sent_, from, len);
  sent_ += len;
  sends_.add(nullptr, ring_end, [&](uint64_t upto) { freed_ = upto; });
}

bool UcxPair::packet_fits(size_t len, bool offered) {
  return packets_out_ && len <= Mailbox::kPacketsUpTo &&
         (!offered || mailbox_->pace().worth(len)) && mailbox_->room(len) &&
         mailbox_->window(sent_) >= len;
}

bool UcxPair::offer_eagerly(size_t len) const {
  return len <= kEagerUpTo &&
         !(packets_out_ &&
           (mailbox_->pace().single_copy(len) || input_in_one_copy(offer_lent_, len)));
}

absl::StatusOr<size_t> UcxPair::stage(const std::byte* data, size_t len, bool more) {
  if (auto s = usable(); !s.ok()) return s;
  if (offer_at_ != nullptr) return fail(offer_changed());
  if (!sends_.empty()) {  // a small send UCX finished when posted leaves nothing to reclaim
    worker_->progress();
    if (auto s = reclaim(); !s.ok()) return s;
  }
  if (len == 0 || sends_.full()) return size_t{0};
  // A packet goes into the peer's mailbox straight from `data`, behind the bytes held back if
  // any: no copy into the ring on the way.
  if (const size_t n = pending_len_ + len; !more && packet_fits(n, /*offered=*/false)) {
    write_packet(Gather{ring_.get() + pending_at_, pending_len_, data}, n, allocated_);
    if (pending_len_ > 0) {
      pending_len_ = 0;
      worker_->not_holding(this);
    }
    return len;
  }
  size_t at = allocated_ % kSendRingBytes;
  if (allocated_ == freed_ && at != 0) {
    // An empty ring starts over at its beginning, so that small sends, which UCX finishes
    // when posted, reuse the same cache lines instead of walking all 8 MiB.
    allocated_ += kSendRingBytes - at;
    freed_ = allocated_;
    at = 0;
  }
  // Bytes held back go out with these as one message when these follow them in the ring.
  if (pending_len_ > 0 && (pending_at_ + pending_len_ != at || pending_len_ == kMaxMessage)) {
    if (auto s = post_pending(); !s.ok()) return s;
    if (sends_.full()) return size_t{0};
  }
  size_t want = std::min(len, kMaxMessage - pending_len_);
  // Packets and tagged messages keep their order by offset (mailbox.hpp).
  if (packets_out_) want = std::min<uint64_t>(want, mailbox_->window(sent_ + pending_len_));
  size_t free = kSendRingBytes - (allocated_ - freed_);
  size_t n = std::min({want, kSendRingBytes - at, free});
  // A message that the ring's end would cut short starts over at its beginning instead.
  const size_t worth = std::min(want, kUncutUpTo);
  if (pending_len_ == 0 && n < worth && at != 0 && free >= (kSendRingBytes - at) + worth) {
    allocated_ += kSendRingBytes - at;
    free -= kSendRingBytes - at;
    at = 0;
    n = std::min(want, free);
  }
  if (n == 0) {
    if (auto s = post_pending(); !s.ok()) return s;
    return size_t{0};
  }
  copy_bytes(ring_.get() + at, data, n);
  if (pending_len_ == 0) {
    pending_at_ = at;
    if (more) worker_->holding(this);
  }
  allocated_ += n;
  pending_len_ += n;
  if (!more || pending_len_ >= kHoldUpTo) {
    if (auto s = post_pending(); !s.ok()) return s;
  }
  return n;
}

absl::Status UcxPair::post_pending() {
  if (pending_len_ == 0) return absl::OkStatus();
  const size_t len = pending_len_;
  pending_len_ = 0;
  worker_->not_holding(this);
  return post(ring_.get() + pending_at_, len, allocated_);
}

void UcxPair::send_held_bytes() {
  worker_->not_holding(this);
  (void)post_pending();  // a failure is the link's: failed_ keeps it for the link's next call
}

bool UcxPair::send_packet_now(const Gather& from, size_t len) {
  if (pending_len_ != 0 || offer_at_ != nullptr || !sends_.empty() || !usable().ok() ||
      !packet_fits(len, /*offered=*/false)) {
    return false;
  }
  write_packet(from, len, allocated_);
  bytes_sent_.add(len);
  return true;
}

absl::StatusOr<size_t> UcxPair::send_some(const std::byte* data, size_t len) {
  Worker::Hold hold(*worker_);
  if (auto s = hear_hello_if_pending(); !s.ok()) return s;
  // A small call's state and data: straight into the peer's mailbox, as send_gathered's,
  // without stage()'s work for a ring and held bytes that are not there.
  if (len > 0 && pending_len_ == 0 && send_packet_now(Gather{data, len, nullptr}, len)) {
    return len;
  }
  return send_locked(data, len);
}

absl::StatusOr<size_t> UcxPair::send_some_more(const std::byte* data, size_t len) {
  Worker::Hold hold(*worker_);
  if (auto s = hear_hello_if_pending(); !s.ok()) return s;
  auto n = stage(data, len, /*more=*/true);
  if (n.ok()) bytes_sent_.add(*n);
  return n;
}

absl::StatusOr<size_t> UcxPair::send_gathered(const Gather& from, size_t len) {
  {
    Worker::Hold hold(*worker_);
    if (auto s = hear_hello_if_pending(); !s.ok()) return s;
    // A packet goes from both places (a call check's state and the block riding with it)
    // straight into the peer's mailbox, not through one buffer on the stack first: a 2-rank
    // 512-byte allgather 2,509 -> 2,428 instructions a call.
    if (send_packet_now(from, len)) return len;
  }
  return Pair::send_gathered(from, len);
}

absl::StatusOr<size_t> UcxPair::send_locked(const std::byte* data, size_t len) {
  auto n = stage(data, len, /*more=*/false);
  if (n.ok()) bytes_sent_.add(*n);
  return n;
}

absl::StatusOr<size_t> UcxPair::offer_some(const std::byte* data, size_t len) {
  return offer(data, len, Lent::kOffered);
}

absl::StatusOr<size_t> UcxPair::lend_input(const std::byte* data, size_t len) {
  return offer(data, len, Lent::kInput);
}

absl::StatusOr<size_t> UcxPair::lend_to_reduce(const std::byte* data, size_t len) {
  return offer(data, len, Lent::kReduced);
}

absl::StatusOr<size_t> UcxPair::offer(const std::byte* data, size_t len, Lent lent) {
  Worker::Hold hold(*worker_);
  if (auto s = hear_hello_if_pending(); !s.ok()) return s;
  const auto done = [&](const std::byte* upto) { offer_done_ = upto; };
  if (offer_at_ == nullptr) {
    // A packet is a copy too, and the mailbox takes it at once.
    if (len < kOfferFrom ||
        (!input_in_one_copy(lent, len) && packet_fits(pending_len_ + len, /*offered=*/true))) {
      return send_locked(data, len);
    }
    if (auto s = usable(); !s.ok()) return s;
    if (auto s = post_pending(); !s.ok()) return s;  // held bytes go first
    offer_at_ = offer_done_ = offer_posted_ = data;
    offer_lent_ = lent;
  } else {
    if (data != offer_at_) return fail(offer_changed());
    worker_->progress();
    const ucs_status_t s = offered_.reap(done);
    if (s != UCS_OK) return failure("an offered send failed", s);
  }
  // Keeps kOffersInFlight messages under way (kReducedInFlight smaller ones), so that the
  // peer finds the next one posted as soon as it has read one. UCX moves each eagerly up to
  // kEagerUpTo, by its zero-copy rendezvous above (pair.hpp).
  const bool reduced = offer_lent_ == Lent::kReduced;
  const size_t in_flight = reduced ? kReducedInFlight : kOffersInFlight;
  const size_t message_bytes = reduced ? kReducedMessageBytes : kMaxMessage;
  const std::byte* const end = data + len;
  while (offered_.size() < in_flight && offer_posted_ < end) {
    size_t n = std::min(static_cast<size_t>(end - offer_posted_), message_bytes);
    if (packets_out_) n = std::min<uint64_t>(n, mailbox_->window(sent_));
    if (n == 0) break;
    const uint64_t offset = sent_;
    sent_ += n;
    ucp_request_param_t param{};
    if (offer_eagerly(n)) {
      param.op_attr_mask = UCP_OP_ATTR_FLAG_FAST_CMPL;
    } else {
      offered_by_rendezvous_ += n;
    }
    void* r = ucp_tag_send_nbx(ep_, offer_posted_, n, o_.tag_out | (offset & kTagOffsetBits),
                               &param);
    if (UCS_PTR_IS_ERR(r)) return failure("posting an offered send", UCS_PTR_STATUS(r));
    offer_posted_ += n;
    offered_.add(r, offer_posted_, done);
  }
  // Bytes of messages that completed beyond what this call asked for are handed over as the
  // caller comes back for them.
  const size_t taken = std::min(static_cast<size_t>(offer_done_ - data), len);
  offer_at_ = data + taken;
  if (offered_.empty() && offer_done_ == offer_at_) offer_at_ = nullptr;  // all taken
  bytes_sent_.add(taken);
  if (taken == 0) {
    if (auto s = usable(); !s.ok()) return s;
  }
  return taken;
}

absl::Status UcxPair::offer_changed() {
  return absl::FailedPreconditionError(
      "a send came while an offer was under way (offer_some must be called again with the "
      "rest of the same, unchanged buffer until it is all taken)");
}

bool UcxPair::tend() {
  Worker::Hold hold(*worker_);
  if (!post_pending().ok()) return false;
  // Not counted as a call driving the worker: the link tender tends between calls (a call's
  // own sends and receives count).
  worker_->progress_between_calls();
  if (!usable().ok() || !reclaim().ok()) return false;
  return !sends_.empty() || !offered_.empty();
}

}  // namespace weft::transport::ucx
