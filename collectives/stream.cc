#include "collectives/stream.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/base/copy.hpp"

namespace weft {

Landing Landing::copy(std::byte* dst, size_t bytes) {
  Landing l;
  l.dst_ = dst;
  l.bytes_ = bytes;
  return l;
}

Landing Landing::reduce(std::byte* dst, const std::byte* local, size_t bytes, ReduceFn fn,
                        size_t elem_bytes, Operands order) {
  Landing l;
  l.dst_ = dst;
  l.local_ = local;
  l.bytes_ = bytes;
  l.fn_ = fn;
  l.elem_ = elem_bytes;
  l.incoming_first_ = order == Operands::kIncomingFirst;
  return l;
}

Landing Landing::reduce_streamed(std::byte* dst, const std::byte* local, size_t bytes,
                                 ReduceFn fn, size_t elem_bytes, std::byte* block,
                                 Operands order) {
  Landing l = reduce(dst, local, bytes, fn, elem_bytes, order);
  l.block_ = block;
  return l;
}

void Landing::apply(const std::byte* in, size_t len) {
  if (fn_ == nullptr) {
    copy_bytes(dst_ + landed_, in, len);
    landed_ += len;
    return;
  }
  // Streamed: a block at a time through the cache-resident block, then out past the caches.
  const size_t step = block_ != nullptr ? kStreamBlockBytes : len;
  for (size_t done = 0; done < len;) {
    const size_t n = std::min(step, len - done);
    std::byte* to = block_ != nullptr ? block_ : dst_ + landed_ + done;
    const std::byte* mine = local_ + landed_ + done;
    const std::byte* theirs = in + done;
    if (incoming_first_) {
      fn_(to, theirs, mine, n / elem_);
    } else {
      fn_(to, mine, theirs, n / elem_);
    }
    if (block_ != nullptr) stream_bytes(dst_ + landed_ + done, block_, n);
    if (echo_ != nullptr) echo_->echo(landed_ + done, to, n);
    done += n;
  }
  landed_ += len;
}

void Landing::accept(const std::byte* data, size_t len) {
  if (fn_ == nullptr) {  // copies need no element alignment
    apply(data, len);
    return;
  }
  if (carry_len_ > 0) {
    const size_t take = std::min(len, elem_ - carry_len_);
    std::memcpy(carry_ + carry_len_, data, take);
    carry_len_ += take;
    data += take;
    len -= take;
    if (carry_len_ < elem_) return;
    carry_len_ = 0;
    apply(carry_, elem_);
  }
  const size_t whole = len - len % elem_;
  if (whole > 0) apply(data, whole);
  if (whole < len) std::memcpy(carry_, data + whole, len - whole);
  carry_len_ = len - whole;
}

IdleCopy::IdleCopy(std::byte* dst, const std::byte* src, size_t bytes, size_t output_bytes)
    : dst_(dst),
      src_(src),
      bytes_(dst == src ? 0 : bytes),
      stream_(output_bytes >= stream_output_copies_from()) {}

void IdleCopy::copy(size_t n) {
  if (stream_) {
    stream_bytes(dst_ + done_, src_ + done_, n);
  } else {
    copy_bytes(dst_ + done_, src_ + done_, n);
  }
  done_ += n;
}

bool IdleCopy::step() {
  // Small enough to keep a waiting link's latency low, large enough to copy at full speed.
  constexpr size_t kPiece = 128 * 1024;
  if (done_ == bytes_) return false;
  copy(std::min(kPiece, bytes_ - done_));
  return true;
}

void IdleCopy::finish() { copy(bytes_ - done_); }

absl::StatusOr<size_t> receive_into(transport::Pair& pair, Landing& landing, size_t max) {
  const size_t want = std::min(landing.wanted(), max);
  if (want == 0) return 0;
  if (std::byte* dst = landing.direct_destination()) {
    auto got = pair.recv_into(dst, want);
    if (got.ok()) landing.landed_directly(*got);
    return got;
  }
  return pair.recv_some(want, [&](const std::byte* data, size_t len) { landing.accept(data, len); });
}

namespace {
std::atomic<int64_t> g_stall_after_ns{INT64_MAX};
}

void Waiter::set_stall_after(absl::Duration d) {
  g_stall_after_ns.store(absl::ToInt64Nanoseconds(d), std::memory_order_relaxed);
}

void Waiter::watch_for_stall(transport::Pair* a, transport::Pair* b) {
  if (stall_noted_) return;
  const absl::Time now = monotonic_now();
  if (idle_since_ == absl::InfinitePast()) {
    idle_since_ = now;  // napping begins ~130 us after the last byte moved: close enough
    return;
  }
  if (now - idle_since_ < absl::Nanoseconds(g_stall_after_ns.load(std::memory_order_relaxed))) {
    return;
  }
  stall_noted_ = true;
  if (a != nullptr) a->note_stall();
  if (b != nullptr && b != a) b->note_stall();
}

namespace {
thread_local LinkTending* current_tending = nullptr;
}  // namespace

TendingScope::TendingScope(LinkTending* tending) : previous_(current_tending) {
  current_tending = tending;
}
TendingScope::~TendingScope() { current_tending = previous_; }

absl::Status Waiter::after_pass(bool moved, transport::Pair* a, transport::Pair* b) {
  if (moved) {
    backoff_.reset();
    idle_since_ = absl::InfinitePast();
    stall_noted_ = false;
    return absl::OkStatus();
  }
  // Liveness checks cost a system call: only once the wait has gone past spinning.
  if (backoff_.is_sleeping() && backoff_.rounds() % 64 == 0) {
    // Every link of the call's communicator answers its peer meanwhile (acknowledgements,
    // bytes to send again after a path failure), including links this wait is not about.
    if (current_tending != nullptr) current_tending->tend_links();
    watch_for_stall(a, b);
    for (transport::Pair* p : {a, b}) {
      if (p == nullptr) continue;
      if (absl::Status s = p->check_peer(); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(what_, ": ", s.message()));
      }
    }
  }
  // Reading the clock costs ~70 ns here, more than the wait for a peer on another core: a
  // spinning waiter looks at it every 64 passes, a napping one every pass.
  if ((backoff_.is_sleeping() || backoff_.rounds() % 64 == 63) && deadline_.expired()) {
    return stalled(a, b);
  }
  backoff_.pause();
  return absl::OkStatus();
}

absl::Status Waiter::stalled(transport::Pair* a, transport::Pair* b) {
  std::string peers;
  for (transport::Pair* p : {a, b == a ? nullptr : b}) {
    if (p != nullptr) absl::StrAppend(&peers, peers.empty() ? "rank " : " or rank ", p->peer());
  }
  return deadline_error(absl::StrCat(what_, " (", peers.empty() ? "no link" : peers, ")"),
                        deadline_);
}

}  // namespace weft
