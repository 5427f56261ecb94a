// A mutex the thread sanitizer can see. Debian's Abseil is not built for ThreadSanitizer, so
// absl::Mutex's lock and unlock are invisible to it and every access they guard would look
// like a race; std::mutex goes through pthread, which the sanitizer intercepts. The
// annotations keep clang's -Wthread-safety checks (ABSL_GUARDED_BY and friends) working.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace weft {

class ABSL_LOCKABLE Mutex {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

/// A mutex for a lock taken on every call (the communicator's call lock, which its link
/// tender takes between calls): uncontended, one compare-exchange to lock and one exchange to
/// unlock, inline, where pthread's lock and unlock cost a 2-rank 64-byte allgather over ucx
/// 55 instructions a call (3% of it). Contended, a waiter sleeps in the kernel (a futex, by
/// std::atomic::wait) as in pthread's. The thread sanitizer sees the atomics' order.
class ABSL_LOCKABLE CallMutex {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (try_lock()) return;
    // Marked as waited for, so that unlock() wakes a sleeper; whoever finds it free takes it.
    while (state_.exchange(kWaitedFor, std::memory_order_acquire) != kFree) {
      state_.wait(kWaitedFor, std::memory_order_relaxed);
    }
  }
  void unlock() ABSL_UNLOCK_FUNCTION() {
    if (state_.exchange(kFree, std::memory_order_release) == kWaitedFor) state_.notify_one();
  }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    uint32_t free = kFree;
    return state_.compare_exchange_strong(free, kHeld, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

 private:
  static constexpr uint32_t kFree = 0, kHeld = 1, kWaitedFor = 2;
  std::atomic<uint32_t> state_{kFree};
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace weft
