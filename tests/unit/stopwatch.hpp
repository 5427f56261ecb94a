// How long a call took, for the tests that bound it (an error must come at once, a wait must
// end at its deadline). Measured on the monotonic clock, as weft's deadlines are: absl::Now()
// is the wall clock, which clock synchronisation may step while a test runs. On this kind of
// virtual machine it once stepped by about 5 s during a 0.2 s wait, and a test failed.
#pragma once

#include <chrono>

#include "absl/time/time.h"

namespace weft::testing {

class Stopwatch {
 public:
  absl::Duration elapsed() const { return absl::FromChrono(Clock::now() - start_); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
};

}  // namespace weft::testing
