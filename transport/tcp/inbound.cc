#include "transport/tcp/inbound.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/tcp/outbound.hpp"
#include "transport/tcp/pair.hpp"

namespace weft::transport::tcp {
namespace {

// Stale frames dropped per path per call: bounds one call's work after a resumption.
constexpr int kMaxHeadsPerScan = 16;

}  // namespace

Inbound::Inbound(std::vector<Path*> data, std::vector<Path*> control, const LinkFaults& faults,
                 LinkEvents* events, RidingAcks* acks)
    : paths_(std::move(data)),
      direct_(paths_.size()),
      ack_every_(ack_every_bytes(direct_)),
      ack_all_every_(ack_all_every_bytes(direct_)),
      control_(std::move(control)),
      events_(events),
      acks_(acks),
      heads_(paths_.size()),
      staging_(new std::byte[kStagingBytes]),
      checked_(new std::byte[kChecksumFrameBytes]),
      corrupt_rng_(static_cast<uint32_t>(events->self() * 7919 + events->peer() + 1)) {
  // Touch every page now so the first receives do not fault them in.
  std::memset(staging_.get(), 0, kStagingBytes);
  std::memset(checked_.get(), 0, kChecksumFrameBytes);
  const bool ours = faults.corrupt_peers.empty() ||
                    std::find(faults.corrupt_peers.begin(), faults.corrupt_peers.end(),
                              events->peer()) != faults.corrupt_peers.end();
  if (ours && faults.corrupt_rate > 0) {
    corrupt_rate_ = std::min(faults.corrupt_rate, 1.0);
    corrupt_in_ = 0;
    corrupt(nullptr, 0);  // draws the first distance
  }
}

// A fault for tests and scripts/inject: each received byte has a bit flipped with
// probability corrupt_rate_, after the sender's CRC and before the receiver's check.
void Inbound::corrupt(std::byte* data, size_t len) {
  if (corrupt_rate_ <= 0) {
    if (data == nullptr) corrupt_in_ = UINT64_MAX;
    return;
  }
  auto draw = [&]() -> uint64_t {
    if (corrupt_rate_ >= 1) return 0;
    const double u = (static_cast<double>(corrupt_rng_()) + 1.0) / (corrupt_rng_.max() + 1.0);
    return static_cast<uint64_t>(std::log(u) / std::log1p(-corrupt_rate_));
  };
  if (data == nullptr) {
    corrupt_in_ = corrupt_rate_ > 0 ? draw() : UINT64_MAX;
    return;
  }
  uint64_t at = corrupt_in_;
  while (at < len) {
    data[at] ^= std::byte{static_cast<uint8_t>(1U << (corrupt_rng_() % 8))};
    at += 1 + draw();
  }
  corrupt_in_ = at - len;
}

bool Inbound::have_head(size_t i) {
  if (heads_[i].frame) return true;
  if (!paths_[i]->alive()) return false;
  auto header = paths_[i]->read_header();
  if (!header.ok()) {
    lost(i, std::string(header.status().message()));
    return false;
  }
  if (!header->has_value()) return false;
  const Frame& f = **header;
  if (f.type != Frame::kData || (f.checksummed && f.length > kChecksumFrameBytes)) {
    lost(i, "a frame that does not belong in a data stream: out of step");
    return false;
  }
  max_epoch_ = std::max(max_epoch_, f.epoch);
  acks_->peer_consumed = std::max(acks_->peer_consumed, f.ack);
  if (f.lent) lent_end_ = std::max(lent_end_, f.offset + f.length);
  heads_[i] = Head{f, 0};
  return true;
}

bool Inbound::stale(const Head& h) const {
  return h.frame->epoch < min_epoch_ || h.frame->offset + h.frame->length <= next_;
}

bool Inbound::drop_payload(size_t i) {
  Head& h = heads_[i];
  while (h.used < h.frame->length) {
    auto n = paths_[i]->read(staging_.get(), std::min<size_t>(h.frame->length - h.used,
                                                              kStagingBytes));
    if (!n.ok()) {
      lost(i, std::string(n.status().message()));
      return false;
    }
    if (*n == 0) return false;
    h.used += static_cast<uint32_t>(*n);
  }
  h = Head{};
  return true;
}

std::optional<size_t> Inbound::find_next() {
  auto covers = [&](size_t i) {
    const Frame& f = *heads_[i].frame;
    return f.offset <= next_ && next_ < f.offset + f.length;
  };
  if (!scanning_ && expected_ < paths_.size() && paths_[expected_]->alive()) {
    const size_t i = expected_;
    for (int k = 0; k < kMaxHeadsPerScan; ++k) {
      if (!have_head(i)) {
        // Once a path was added, the sender may leave one that stays open (a detour, or its
        // end: Outbound::detour) without this end knowing: look everywhere, not only here.
        if (paths_[i]->alive() && paths_.size() == direct_) return std::nullopt;
        break;
      }
      if (stale(heads_[i])) {
        if (!drop_payload(i)) return std::nullopt;
        continue;
      }
      if (covers(i)) return i;
      break;  // a later byte than expected: look everywhere
    }
  }
  scanning_ = true;
  size_t alive = 0, blocked = 0;
  for (size_t i = 0; i < paths_.size(); ++i) {
    for (int k = 0; k < kMaxHeadsPerScan && paths_[i]->alive(); ++k) {
      if (!have_head(i)) break;
      if (stale(heads_[i])) {
        if (!drop_payload(i)) break;
        continue;
      }
      if (covers(i)) {
        // The rest of this frame comes from here too, wherever the last one pointed.
        scanning_ = false;
        expected_ = i;
        return i;
      }
      break;
    }
    if (!paths_[i]->alive()) continue;
    ++alive;
    blocked += heads_[i].frame && !stale(heads_[i]);  // whole, and beyond the byte needed
  }
  if (alive == 0 && failed_.ok() && !may_strand_) {
    failed_ = events_->no_path_left("receiving", paths_);
  }
  // Every live path holds a whole frame beyond the byte needed next. That byte went over a
  // path now gone, in an epoch this end still accepts (it asked for a resend before it saw
  // the epoch), so it can only come from the sender's next epoch, queued behind these
  // frames: ask again, which makes them stale, to be dropped and read past.
  if (alive > 0 && blocked == alive && !resend_owed_) ask_resend();
  return std::nullopt;
}

bool Inbound::verify(size_t i) {
  Head& h = heads_[i];
  if (h.verified) return true;
  const Frame& f = *h.frame;
  while (h.used < f.length) {
    auto n = paths_[i]->read(checked_.get() + h.used, f.length - h.used);
    if (!n.ok()) {
      lost(i, std::string(n.status().message()));
      return false;
    }
    if (*n == 0) return false;
    h.used += static_cast<uint32_t>(*n);
  }
  corrupt(checked_.get(), f.length);
  if (crc32c(checked_.get(), f.length) != f.payload_crc) {
    events_->checksum_mismatch(*paths_[i], f.offset, f.length);
    h = Head{};
    ask_resend();
    return false;
  }
  h.verified = true;
  return true;
}

void Inbound::frame_done(size_t i) {
  const Frame& f = *heads_[i].frame;
  min_epoch_ = std::max(min_epoch_, f.epoch);
  expected_ = f.next_path;
  heads_[i] = Head{};
}

absl::StatusOr<size_t> Inbound::receive(size_t max, const Scatter* to, const Sink* sink) {
  if (!failed_.ok()) return failed_;
  if (const double r = injected_rate_.load(std::memory_order_relaxed); r >= 0 && r != corrupt_rate_) {
    corrupt_rate_ = std::min(r, 1.0);
    corrupt(nullptr, 0);  // draws the distance to the first flip at the new rate
  }
  notice_deaths();
  flush_control();
  size_t handed = 0;
  std::optional<size_t> last;
  while (handed < max && failed_.ok()) {
    const std::optional<size_t> next = find_next();
    if (!next) break;
    const size_t i = *next;
    last = i;
    Head& h = heads_[i];
    const Frame& f = *h.frame;
    if (f.checksummed) {
      if (!verify(i)) {
        if (heads_[i].frame && paths_[i]->alive()) break;  // the rest is not here yet
        continue;                                            // dropped: look again
      }
      const size_t from = next_ - f.offset;
      const size_t n = std::min(max - handed, f.length - from);
      if (to != nullptr) {
        for (size_t done = 0; done < n;) {
          const size_t run = std::min(n - done, to->run_from(handed + done));
          std::memcpy(to->at(handed + done), checked_.get() + from + done, run);
          done += run;
        }
      } else {
        (*sink)(checked_.get() + from, n);
      }
      next_ += n;
      handed += n;
      paths_[i]->payload_received.add(n);
      if (next_ == f.offset + f.length) {
        frame_done(i);
        if (paths_[i]->drained()) break;  // the socket had no more: do not ask it again now
      }
      continue;
    }
    const uint64_t at = f.offset + h.used;
    if (at < next_) {  // bytes this side already has: sent again after a resumption
      auto n = paths_[i]->read(staging_.get(), std::min<uint64_t>(next_ - at, kStagingBytes));
      if (!n.ok()) {
        lost(i, std::string(n.status().message()));
        continue;
      }
      if (*n == 0) break;
      h.used += static_cast<uint32_t>(*n);
      continue;
    }
    size_t want = std::min<uint64_t>(max - handed, f.offset + f.length - next_);
    iovec parts[2];
    int count = 1;
    if (to != nullptr) {
      const size_t first = std::min(want, to->run_from(handed));
      parts[0] = {to->at(handed), first};
      if (first < want) {
        parts[1] = {to->at(handed + first), want - first};
        count = 2;
      }
    } else {
      want = std::min(want, kStagingBytes);
      parts[0] = {staging_.get(), want};
    }
    // Reading up to the frame's end, the next header comes in the same system call.
    const bool to_end = next_ + want == f.offset + f.length;
    auto n = to_end ? paths_[i]->read_to_frame_end(parts, count) : paths_[i]->read(parts, count);
    if (!n.ok()) {
      lost(i, std::string(n.status().message()));
      continue;
    }
    if (*n == 0) break;
    if (corrupt_rate_ > 0) {
      const size_t first = std::min(*n, parts[0].iov_len);
      corrupt(static_cast<std::byte*>(parts[0].iov_base), first);
      if (*n > first) corrupt(static_cast<std::byte*>(parts[1].iov_base), *n - first);
    }
    if (to == nullptr) (*sink)(staging_.get(), *n);
    h.used += static_cast<uint32_t>(*n);
    paths_[i]->payload_received.add(*n);
    next_ += *n;
    handed += *n;
    if (next_ == f.offset + f.length) frame_done(i);
    // Drained what that socket had (fewer bytes than asked, nothing read ahead left).
    if (*n < want || paths_[i]->drained()) break;
  }
  acks_->consumed = next_;
  if (last) maybe_ack(*last);
  if (handed > 0) return handed;
  if (!failed_.ok()) return failed_;
  return size_t{0};
}

// While the caller waits, everything consumed is acknowledged, so the sender's ring frees
// the last bytes of a message and its own waits stop listening for more.
absl::Status Inbound::tend() {
  if (!failed_.ok()) return failed_;
  notice_deaths();
  if (next_ == acked_ && !resend_owed_ &&
      std::none_of(control_.begin(), control_.end(),
                   [](Path* p) { return p->control_out_left > 0; })) {
    return failed_;  // nothing owed: no system call
  }
  flush_control();
  if (next_ > acked_) {
    for (size_t i = 0; i < control_.size(); ++i) {
      if (!control_[i]->alive() || control_[i]->control_out_left > 0) continue;
      acknowledge_on(i);
      break;
    }
  }
  return failed_;
}

void Inbound::call_received() {
  if (!failed_.ok()) return;
  const uint64_t carried = std::max(acked_, acks_->carried);
  if (lent_end_ <= carried || next_ <= carried) return;
  for (size_t i = 0; i < control_.size(); ++i) {
    if (control_[i]->alive()) return acknowledge_on(i);
  }
}

void Inbound::acknowledge_on(size_t i) {
  if (!control_[i]->alive()) return;
  if (control_[i]->control_out_left > 0) flush_control();
  if (control_[i]->control_out_left > 0 || !control_[i]->alive()) return;
  Frame ack;
  ack.type = Frame::kAck;
  ack.offset = next_;
  send_control(ack, i);
  acked_ = next_;
}

// What a data frame carried counts here, not in tend(): a frame may die with its path, and a
// waiting caller then still acknowledges on the control socket.
void Inbound::maybe_ack(size_t i) {
  const uint64_t carried = std::max(acked_, acks_->carried);
  if (next_ - carried < ack_every_ && next_ - acked_ < ack_all_every_) return;
  acknowledge_on(i);
}

void Inbound::ask_resend() {
  resend_owed_ = true;
  min_epoch_ = std::max(min_epoch_, max_epoch_ + 1);
  scanning_ = true;
}

void Inbound::send_control(const Frame& f, size_t i) {
  Path& path = *control_[i];
  encode_frame(f, path.control_out);
  path.control_out_left = kFrameHeaderBytes;
  iovec part{path.control_out, kFrameHeaderBytes};
  auto n = path.write(&part, 1);
  if (!n.ok()) {
    path.control_out_left = 0;
    return lost(i, std::string(n.status().message()));
  }
  path.control_out_left -= *n;
}

void Inbound::flush_control() {
  for (size_t i = 0; i < control_.size(); ++i) {
    Path& path = *control_[i];
    if (path.control_out_left == 0 || !path.alive()) continue;
    iovec part{path.control_out + kFrameHeaderBytes - path.control_out_left,
               path.control_out_left};
    auto n = path.write(&part, 1);
    if (!n.ok()) {
      path.control_out_left = 0;
      lost(i, std::string(n.status().message()));
      continue;
    }
    path.control_out_left -= *n;
  }
  if (!resend_owed_) return;
  // On every live path, so that one that dies next does not swallow the request.
  Frame r;
  r.type = Frame::kResend;
  r.epoch = min_epoch_ - 1;
  r.offset = next_;
  r.length = lost_mask_;
  // Cleared first: a path that fails under this very request asks again (lost()), with a
  // later epoch and one more path in the mask, and that request must still go out.
  resend_owed_ = false;
  bool sent = false;
  for (size_t i = 0; i < control_.size(); ++i) {
    if (!control_[i]->alive() || control_[i]->control_out_left > 0) continue;
    send_control(r, i);
    sent = true;
  }
  if (!sent) resend_owed_ = true;
  acked_ = std::max(acked_, next_);
}

void Inbound::notice_deaths() {
  for (size_t i = 0; i < paths_.size() && i < 32; ++i) {
    if (!paths_[i]->alive() && (lost_mask_ >> i & 1U) == 0) lost(i, paths_[i]->cause());
  }
}

void Inbound::lost(size_t i, std::string cause) {
  Path& path = *paths_[i];
  if (path.alive()) {
    path.kill(std::move(cause));
    events_->path_lost("receiving", path, next_);
  }
  if (i < 32) lost_mask_ |= 1U << i;
  heads_[i] = Head{};
  const bool any = std::any_of(paths_.begin(), paths_.end(), [](Path* p) { return p->alive(); });
  if (!any) {
    if (failed_.ok() && !may_strand_) failed_ = events_->no_path_left("receiving", paths_);
    return;
  }
  ask_resend();
}

bool Inbound::stranded() const {
  return failed_.ok() &&
         std::none_of(paths_.begin(), paths_.end(), [](Path* p) { return p->alive(); });
}

void Inbound::add_path(Path* data, Path* control) {
  paths_.push_back(data);
  control_.push_back(control);
  heads_.emplace_back();
  ask_resend();  // goes out on the new path's control socket at the next flush
}

}  // namespace weft::transport::tcp
