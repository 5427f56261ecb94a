// A tcp link's sending half (outbound.hpp says how it sends): staging into the ring and
// lending, frames written to the wire, and what a call's end keeps. Its paths, the
// acknowledgements read back and resumptions are outbound_paths.cc's.
#include "transport/tcp/outbound.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "src/base/copy.hpp"
#include "transport/tcp/pair.hpp"

namespace weft::transport::tcp {
namespace {

// A call stages up to a stripe ahead of the wire, so that frames are a stripe long (fewer
// headers to read) while each call still sends at most kMaxSendPerCall; every byte is copied
// once whenever it is staged.
constexpr size_t kStageAheadBytes = kStripeBytes;
constexpr size_t kPushPerCallBytes = kMaxSendPerCall;
// Acknowledgements are read when the ring runs short, and every so many calls regardless,
// so resend requests are seen while the ring still has room.
constexpr uint64_t kControlEveryCalls = 64;
constexpr size_t kMaxPlainFrameBytes = kStripeBytes;
// Smaller lends are copied as before: a copy of a few KiB costs less than reading the
// acknowledgements when the call ends.
constexpr size_t kLendFrom = 64 << 10;
// About what a copy into the ring takes (bytes a nanosecond), to bound the wait for an
// acknowledgement that would spare it.
constexpr uint64_t kCopyBytesPerNs = 16;
// A frame's iovecs: its header, and two runs (start_frame), each wrapping the ring at most once.
constexpr int kFrameParts = 5;

}  // namespace

Outbound::Outbound(std::vector<Path*> data, std::vector<Path*> control, bool checksum,
                   const LinkFaults& faults, LinkEvents* events, RidingAcks* acks)
    : paths_(std::move(data)),
      control_(std::move(control)),
      checksum_(checksum),
      faults_(faults),
      events_(events),
      acks_(acks),
      retain_bytes_(retain_bytes(paths_.size())),
      ring_(new std::byte[retain_bytes_]),
      direct_(paths_.size()) {
  // Touch every page now: nothing on the data path may fault.
  std::memset(ring_.get(), 0, retain_bytes_);
  for (size_t i = 0; i < paths_.size(); ++i) live_.push_back(i);
  if (faults_.kill_peer != events_->peer()) faults_.kill_peer = -1;
}

size_t Outbound::path_for(uint64_t offset) const {
  if (live_.size() == 1) return live_[0];
  return live_[((offset - epoch_start_) / kStripeBytes) % live_.size()];
}

void Outbound::stage_lent(const std::byte* data, size_t len) {
  drop_acked_spans();
  const uint64_t to = std::min<uint64_t>(taken_ + len, window_end());
  if (staged_ >= to) return;
  const std::byte* at = data + (staged_ - taken_);
  if (lent_count_ > 0) {
    Lent& last = lent_[(lent_first_ + lent_count_ - 1) % kMaxLent];
    if (last.end == staged_ && last.at + (last.end - last.start) == at) {
      last.end = staged_ = to;
      return;
    }
  }
  if (lent_count_ == kMaxLent) return stage(data, len);
  lent_[(lent_first_ + lent_count_) % kMaxLent] = {staged_, to, at};
  ++lent_count_;
  staged_ = to;
}

void Outbound::drop_acked_spans() {
  while (lent_count_ > 0 && lent(0).end <= kept_from()) {
    lent_first_ = (lent_first_ + 1) % kMaxLent;
    --lent_count_;
  }
}

std::pair<const std::byte*, size_t> Outbound::bytes_at(uint64_t offset, size_t max) const {
  uint64_t ring_run = UINT64_MAX;
  for (size_t i = 0; i < lent_count_; ++i) {
    const Lent& l = lent(i);
    if (offset < l.start) {
      ring_run = l.start - offset;
      break;
    }
    if (offset < l.end) return {l.at + (offset - l.start), std::min<uint64_t>(max, l.end - offset)};
  }
  const size_t at = offset & (retain_bytes_ - 1);
  return {ring_.get() + at, std::min<uint64_t>({max, retain_bytes_ - at, ring_run})};
}

uint64_t Outbound::run_at(uint64_t offset) const {
  for (size_t i = 0; i < lent_count_; ++i) {
    const Lent& l = lent(i);
    if (offset < l.start) return l.start - offset;
    if (offset < l.end) return l.end - offset;
  }
  return UINT64_MAX;
}

void Outbound::call_ends() {
  if (lent_count_ == 0) return;
  // What was acknowledged meanwhile needs no copy: first what rode in on the peer's data,
  // then, if that was not all, what came on the control sockets.
  absorb_riding_acks();
  const uint64_t lent_end = lent(lent_count_ - 1).end;
  // Many bytes left: their acknowledgement is on its way (Inbound::call_received), and a
  // wait for it up to what the copy would take costs at most twice the copy. Fewer are
  // copied at once: reading the control socket would cost more.
  const uint64_t unacked = lent_end > acked_ ? lent_end - std::max(acked_, lent(0).start) : 0;
  if (failed_.ok() && !live_.empty() && unacked >= kAckLentFrom && flagged_end_ > acked_) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::nanoseconds(unacked / kCopyBytesPerNs);
    do {
      read_all_control(lent_end);
    } while (failed_.ok() && lent_end > acked_ && std::chrono::steady_clock::now() < until);
  }
  // Only from the first byte still needed on: the ring's places below it may hold newer bytes.
  const uint64_t kept = kept_from();
  for (size_t i = 0; i < lent_count_; ++i) {
    const Lent& l = lent(i);
    const uint64_t from = std::max(l.start, kept);
    if (from < l.end) put_in_ring(from, l.at + (from - l.start), l.end - from);
  }
  lent_first_ = lent_count_ = 0;
}

void Outbound::put_in_ring(uint64_t offset, const std::byte* data, size_t len) {
  for (size_t done = 0; done < len;) {
    const size_t at = (offset + done) & (retain_bytes_ - 1);
    const size_t n = std::min(len - done, retain_bytes_ - at);
    copy_bytes(ring_.get() + at, data + done, n);
    done += n;
  }
}

void Outbound::stage(const std::byte* data, size_t len) {
  const uint64_t end = taken_ + len;
  const uint64_t to =
      std::min({end, window_end(), std::max(wire_, taken_) + kStageAheadBytes});
  if (staged_ >= to) return;
  put_in_ring(staged_, data + (staged_ - taken_), static_cast<size_t>(to - staged_));
  staged_ = to;
}

absl::StatusOr<size_t> Outbound::send(const std::byte* data, size_t len, int flags) {
  return take(data, len, flags, /*keep_where_it_lies=*/false);
}

absl::StatusOr<size_t> Outbound::lend(const std::byte* data, size_t len, int flags) {
  return take(data, len, flags, /*keep_where_it_lies=*/len >= kLendFrom);
}

absl::StatusOr<size_t> Outbound::take(const std::byte* data, size_t len, int flags,
                                      bool keep_where_it_lies) {
  if (!failed_.ok()) return failed_;
  notice_deaths();
  absorb_riding_acks();
  if (++calls_ % kControlEveryCalls == 0 || staged_ - acked_ > retain_bytes_ / 2) {
    read_all_control();
    if (!failed_.ok()) return failed_;
  }
  if (keep_where_it_lies) {
    stage_lent(data, len);
  } else {
    stage(data, len);
  }
  // Bytes the caller follows at once with more (a call check's state, then its data) wait in
  // the ring and leave in one frame with what follows: one system call and one header, not
  // two. Without a next send they leave with the pair's next receive or tend().
  if ((flags & MSG_MORE) != 0 && !keep_where_it_lies && staged_ == taken_ + len) {
    taken_ += len;
    held_ = true;
    return len;
  }
  // The ring holds what MSG_MORE asked the kernel to: a striped link's next bytes may go on
  // another socket, where they could not release this one's.
  push(flags & ~MSG_MORE);
  if (!failed_.ok()) return failed_;
  if (wire_ <= taken_) return size_t{0};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(wire_, taken_ + len) - taken_);
  taken_ += n;
  return n;
}

absl::Status Outbound::tend() {
  if (!failed_.ok()) return failed_;
  notice_deaths();
  absorb_riding_acks();
  if (!unacknowledged() && !owes() && !held_) return failed_;  // nothing can come: no system call
  read_all_control();
  if (owes() || held_) push(0);
  return failed_;
}

void Outbound::push(int flags) {
  held_ = false;
  const uint64_t stop = wire_ + kPushPerCallBytes;
  // Stranded (no path, may_strand_): the bytes wait in the ring for one.
  while (failed_.ok() && !live_.empty()) {
    if (!cur_.active) {
      if (wire_ >= std::min(staged_, stop)) return;
      start_frame();
    }
    if (!write_current(flags, stop)) return;
  }
}

void Outbound::start_frame() {
  // Two runs at most (a call check's state in the ring, then the data lent behind it);
  // run_at's UINT64_MAX (no span ahead) stays unbounded.
  uint64_t runs = run_at(wire_);
  if (runs != UINT64_MAX) runs += std::min(run_at(wire_ + runs), UINT64_MAX - runs);
  size_t len = std::min<uint64_t>({staged_ - wire_, runs,
                                   checksum_ ? kChecksumFrameBytes : kMaxPlainFrameBytes});
  if (live_.size() > 1) {
    len = std::min<uint64_t>(len, kStripeBytes - (wire_ - epoch_start_) % kStripeBytes);
  }
  Frame f;
  f.type = Frame::kData;
  f.checksummed = checksum_;
  f.epoch = epoch_;
  f.offset = wire_;
  f.length = static_cast<uint32_t>(len);
  f.next_path = static_cast<uint8_t>(path_for(wire_ + len));
  f.ack = acks_->consumed;
  // Lent, in a span long enough that call_ends would wait for its acknowledgement.
  for (size_t i = 0; i < lent_count_ && !f.lent; ++i) {
    const Lent& l = lent(i);
    f.lent = l.start < wire_ + len && l.end > wire_ && l.end - l.start >= kAckLentFrom;
  }
  if (f.lent) flagged_end_ = std::max(flagged_end_, wire_ + len);
  if (checksum_) {
    uint32_t crc = 0;
    for (uint64_t o = wire_; o < wire_ + len;) {
      const auto [bytes, n] = bytes_at(o, wire_ + len - o);
      crc = crc32c(bytes, n, crc);
      o += n;
    }
    f.payload_crc = crc;
  }
  cur_.active = true;
  cur_.orphan = false;
  cur_.path = path_for(wire_);
  cur_.sent = 0;
  cur_.start = wire_;
  cur_.end = wire_ + len;
  cur_.ack = f.ack;
  encode_frame(f, cur_.header);
}

bool Outbound::write_current(int flags, uint64_t stop) {
  Path& path = *paths_[cur_.path];
  const size_t frame_bytes = kFrameHeaderBytes + (cur_.end - cur_.start);
  size_t budget = frame_bytes - cur_.sent;
  // This call's share may end inside the frame; the next call sends on from there.
  if (!cur_.orphan && cur_.end > stop) {
    const size_t upto = kFrameHeaderBytes + (stop > cur_.start ? stop - cur_.start : 0);
    if (upto > cur_.sent && upto - cur_.sent < budget) budget = upto - cur_.sent;
  }
  // A test's fault: the path dies at a chosen byte of the stream (or of a header).
  bool kill_after = false;
  if (faults_.kill_peer >= 0 && !cur_.orphan) {
    size_t kill_point = SIZE_MAX;
    if (faults_.kill_header_bytes >= 0) {
      if (cur_.start == faults_.kill_at) kill_point = static_cast<size_t>(faults_.kill_header_bytes);
    } else if (cur_.start <= faults_.kill_at && faults_.kill_at <= cur_.end) {
      kill_point = kFrameHeaderBytes + (faults_.kill_at - cur_.start);
    }
    if (kill_point != SIZE_MAX && kill_point >= cur_.sent && kill_point - cur_.sent <= budget) {
      budget = kill_point - cur_.sent;
      kill_after = true;
    }
  }
  iovec parts[kFrameParts];
  int n_parts = 0;
  size_t left = budget;
  if (cur_.sent < kFrameHeaderBytes && left > 0) {
    const size_t h = std::min(kFrameHeaderBytes - cur_.sent, left);
    parts[n_parts++] = {cur_.header + cur_.sent, h};
    left -= h;
  }
  uint64_t pos = cur_.start + (cur_.sent > kFrameHeaderBytes ? cur_.sent - kFrameHeaderBytes : 0);
  // At most two runs (start_frame), each in one lent span or in the ring, wrapping at most once.
  while (left > 0 && n_parts < kFrameParts) {
    const auto [bytes, n] = bytes_at(pos, left);
    parts[n_parts++] = {const_cast<std::byte*>(bytes), n};
    pos += n;
    left -= n;
  }
  size_t n = 0;
  if (n_parts > 0) {
    auto wrote = path.write(parts, n_parts, budget == frame_bytes - cur_.sent ? flags : 0);
    if (!wrote.ok()) {
      lost(cur_.path, std::string(wrote.status().message()));
      return failed_.ok();
    }
    n = *wrote;
  }
  const size_t payload_before = cur_.sent > kFrameHeaderBytes ? cur_.sent - kFrameHeaderBytes : 0;
  if (cur_.sent < kFrameHeaderBytes && cur_.sent + n >= kFrameHeaderBytes) {
    acks_->carried = std::max(acks_->carried, cur_.ack);  // on its way to the peer now
  }
  cur_.sent += n;
  const size_t payload_after = cur_.sent > kFrameHeaderBytes ? cur_.sent - kFrameHeaderBytes : 0;
  path.payload_sent.add(payload_after - payload_before);
  if (!cur_.orphan) {
    wire_ = cur_.start + payload_after;
    sent_end_ = std::max(sent_end_, wire_);
  }
  if (kill_after && n == budget) {
    faults_.kill_peer = -1;  // once
    lost(cur_.path, "a fault injected by WEFT_INJECT_PATH_KILL");
    return failed_.ok();
  }
  if (cur_.sent == frame_bytes) {
    cur_.active = false;
    apply_use();  // a rail change waits for the frame under way
    return true;
  }
  return false;  // the socket is full, or this call's share is sent
}

}  // namespace weft::transport::tcp
