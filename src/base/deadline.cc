#include "src/base/deadline.hpp"

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include "absl/strings/str_cat.h"

namespace weft {

int64_t Deadline::now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

Deadline Deadline::after(absl::Duration d) {
  return after_ns(std::max<int64_t>(absl::ToInt64Nanoseconds(d), 0));  // saturates for infinite
}

Deadline Deadline::after_ns(int64_t ns) {
  const int64_t now = now_ns();
  return Deadline(ns >= INT64_MAX - now ? INT64_MAX : now + ns);
}

absl::Duration Deadline::remaining() const {
  if (at_ns_ == INT64_MAX) return absl::InfiniteDuration();
  return absl::Nanoseconds(at_ns_ - now_ns());
}

int Deadline::remaining_ms() const {
  const int64_t ms = absl::ToInt64Milliseconds(remaining());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

namespace {
std::atomic<bool> g_oversubscribed{false};
}

void Backoff::set_oversubscribed(bool oversubscribed) {
  g_oversubscribed.store(oversubscribed, std::memory_order_relaxed);
  // Linux pads every sleep by the timer slack (50 us by default), which would turn the
  // first short naps into long ones.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

bool Backoff::oversubscribed() { return g_oversubscribed.load(std::memory_order_relaxed); }

void Backoff::pause() {
  if (++rounds_ <= kSpinRounds) {
    if (!g_oversubscribed.load(std::memory_order_relaxed)) {
      if (rounds_ > kEagerRounds) spin_pause();
      // A yield is a ~0.6 us system call on these VMs: rare enough to cost little, often
      // enough that a stray process sharing the core is not starved for long.
      if (rounds_ % 1024 == 0) sched_yield();
      return;
    }
    rounds_ = kSpinRounds + 1;
  }
  if (rounds_ <= kSpinRounds + kYieldRounds) {
    sched_yield();
    return;
  }
  // Naps grow from 5 us to 100 us.
  const uint64_t extra = rounds_ - kSpinRounds - kYieldRounds;
  const long ns = static_cast<long>(std::min<uint64_t>(5000 + extra * 5000, 100000));
  timespec ts{0, ns};
  nanosleep(&ts, nullptr);
}

absl::Time monotonic_now() { return absl::FromUnixNanos(Deadline::now_ns()); }

absl::Status deadline_error(std::string_view what, const Deadline& deadline) {
  if (deadline.cancelled()) {
    return absl::AbortedError(absl::StrCat("aborted while waiting for ", std::string(what),
                                           " (Communicator::abort was called)"));
  }
  return deadline_error(what);
}

absl::Status deadline_error(std::string_view what) {
  return absl::DeadlineExceededError(
      absl::StrCat("timed out waiting for ", std::string(what),
                   "; a peer may have died or stalled (raise WEFT_TIMEOUT if the job is just slow)"));
}

}  // namespace weft
