// The thread that keeps a communicator's links answering between calls. A tcp link keeps
// what it sent until the peer acknowledges it, and may have to send it again (a path failed,
// a checksum did not match) after this rank's call has returned: the peer may still be
// reading. NCCL leaves such work to a proxy thread; here one thread per communicator looks
// every kTendInterval, and only while no call runs (it takes the call lock with try_lock, so
// a call never waits longer than one look), and asks every link to tend() itself. A link
// with nothing outstanding answers without a system call.
#pragma once

#include <condition_variable>
#include <functional>
#include <thread>

#include "absl/time/time.h"
#include "src/base/mutex.hpp"

namespace weft::detail {

inline constexpr absl::Duration kTendInterval = absl::Milliseconds(1);
inline constexpr absl::Duration kIdleInterval = absl::Milliseconds(10);

class LinkTender {
 public:
  /// While `calls` is free, holds it and calls `tend`, which says whether work is left.
  LinkTender(CallMutex* calls, std::function<bool()> tend);
  ~LinkTender();  ///< stops and joins the thread
  LinkTender(const LinkTender&) = delete;
  LinkTender& operator=(const LinkTender&) = delete;

 private:
  void run();

  CallMutex* calls_;
  std::function<bool()> tend_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace weft::detail
