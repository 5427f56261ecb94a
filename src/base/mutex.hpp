// A mutex the thread sanitizer can see. Debian's Abseil is not built for ThreadSanitizer, so
// absl::Mutex's lock and unlock are invisible to it and every access they guard would look
// like a race; std::mutex goes through pthread, which the sanitizer intercepts. The
// annotations keep clang's -Wthread-safety checks (ABSL_GUARDED_BY and friends) working.
#pragma once

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
