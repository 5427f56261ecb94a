// Deadlines and polite waiting: every wait in weft is bounded, and a waiting rank gives its
// core away quickly because ranks often outnumber cores.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace weft {

/// A point in time after which a wait gives up. It reads the coarse monotonic clock: ~6 ns
/// against absl::Now's ~63 ns here (every collective call starts a deadline, and an 8-byte
/// allreduce takes ~300 ns), its 4 ms steps do not matter for timeouts of seconds, and a
/// wall-clock jump cannot fire or stall it.
class Deadline {
 public:
  static Deadline after(absl::Duration d);
  /// The same, for a duration in nanoseconds (>= 0, INT64_MAX: never): the form a caller that
  /// starts a deadline on every call keeps its timeout in.
  static Deadline after_ns(int64_t ns);
  static Deadline never() { return Deadline(INT64_MAX); }
  /// The same deadline, also expired as soon as `*cancel` is true (Communicator::abort).
  Deadline cancelled_by(const std::atomic<bool>* cancel) const {
    Deadline d = *this;
    d.cancel_ = cancel;
    return d;
  }

  bool cancelled() const { return cancel_ != nullptr && cancel_->load(std::memory_order_relaxed); }
  bool expired() const { return cancelled() || now_ns() >= at_ns_; }
  absl::Duration remaining() const;
  /// Milliseconds left, clamped to [0, INT32_MAX], for poll(2).
  int remaining_ms() const;

 private:
  explicit Deadline(int64_t at_ns) : at_ns_(at_ns) {}
  static int64_t now_ns();
  friend absl::Time monotonic_now();

  int64_t at_ns_;  // on CLOCK_MONOTONIC_COARSE
  const std::atomic<bool>* cancel_ = nullptr;
};

/// Now on the clock deadlines use, as an absl::Time, for the pauses and timeouts kept as
/// instants (a listener's accept pause, a handshake's age, a dial's retry). Not absl::Now():
/// clock synchronisation may step the wall clock, by seconds on these virtual machines,
/// which would stall a pause or cut a handshake short. Compare it only with other instants
/// from here.
absl::Time monotonic_now();

/// Tells the CPU this thread is spinning on a load (x86 PAUSE, Arm YIELD): the core's other
/// hardware thread gets its resources, and leaving the loop costs no mis-speculation.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// Backs off while a condition is not met. With a core per rank, it spins (about 130 us,
/// yielding now and then in case a stray process shares the core): a peer on another
/// core answers within that, and a nap would add its own length to every step of a ring.
/// When this host runs more ranks than it has cores, spinning only delays the peer that
/// needs the core, so it yields instead. Either way, a wait that goes on naps with growing
/// sleeps, so an idle job stops burning the CPU. Call reset() after progress.
class Backoff {
 public:
  void pause();
  void reset() { rounds_ = 0; }
  /// True once the waiter has gone past spinning; cheap liveness checks belong there.
  bool is_sleeping() const { return rounds_ > kSpinRounds + kYieldRounds; }
  uint64_t rounds() const { return rounds_; }

  /// Process-wide: set by each communicator from its host's rank and core counts.
  static void set_oversubscribed(bool oversubscribed);
  static bool oversubscribed();

 private:
  static constexpr uint64_t kSpinRounds = 4096;  // one ~30 ns pause each
  // The first rounds look again at once: a pause is a fifth of a small call here, and a
  // partner's answer is usually a line crossing (~0.1 us) away.
  static constexpr uint64_t kEagerRounds = 64;
  static constexpr uint64_t kYieldRounds = 64;
  uint64_t rounds_ = 0;
};

/// The DeadlineExceeded error every wait returns, naming what was awaited; Aborted instead
/// when `deadline` was cancelled.
absl::Status deadline_error(std::string_view what);
absl::Status deadline_error(std::string_view what, const Deadline& deadline);

}  // namespace weft
