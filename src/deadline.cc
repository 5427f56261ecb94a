#include "src/deadline.hpp"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"

namespace weft {

int Deadline::remaining_ms() const {
  const int64_t ms = absl::ToInt64Milliseconds(remaining());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

void Backoff::pause() {
  ++rounds_;
  if (rounds_ <= kSpinRounds) {
    for (int i = 0; i < 16; ++i) __builtin_ia32_pause();
    return;
  }
  if (rounds_ <= kSpinRounds + kYieldRounds) {
    sched_yield();
    return;
  }
  // Naps grow from 2 us to 100 us: short enough for latency, long enough to free the core.
  const uint64_t extra = rounds_ - kSpinRounds - kYieldRounds;
  const long ns = static_cast<long>(std::min<uint64_t>(2000 + extra * 2000, 100000));
  timespec ts{0, ns};
  nanosleep(&ts, nullptr);
}

absl::Status deadline_error(std::string_view what) {
  return absl::DeadlineExceededError(
      absl::StrCat("timed out waiting for ", std::string(what),
                   "; a peer may have died or stalled (raise WEFT_TIMEOUT if the job is just slow)"));
}

}  // namespace weft
