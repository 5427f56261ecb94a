// The ucx worker's own thread (transport/ucx/worker.hpp) takes over once calls stop driving
// the worker, however long they drove it first and although the link tender goes on
// progressing the worker between calls: the bytes a link held back then leave.
#ifdef WEFT_HAVE_UCX

#include "transport/ucx/worker.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace weft::transport::ucx {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// A link holding bytes back: it notes when the worker's thread asks it to send them.
class HeldBytes : public HoldsBytes {
 public:
  explicit HeldBytes(Worker& worker) : worker_(worker) {}
  void send_held_bytes() override {
    worker_.not_holding(this);
    sent_.store(true, std::memory_order_release);
  }
  bool sent() const { return sent_.load(std::memory_order_acquire); }

 private:
  Worker& worker_;
  std::atomic<bool> sent_{false};
};

TEST(UcxWorker, ItsThreadTakesOverOnceCallsStopThoughTheTenderGoesOn) {
  auto made = Worker::create("", 1);
  ASSERT_TRUE(made.ok()) << made.status();
  Worker& worker = **made;
  // Calls drive the worker for 300 ms, long enough for the thread's naps to reach their
  // longest.
  for (const auto end = steady_clock::now() + milliseconds(300); steady_clock::now() < end;) {
    Worker::Hold hold(worker);
    worker.progress();
  }
  HeldBytes held(worker);
  {
    Worker::Hold hold(worker);
    worker.holding(&held);
  }
  // Calls have stopped; the link tender tends every 10 ms, as between calls.
  const auto give_up = steady_clock::now() + milliseconds(2000);
  while (!held.sent() && steady_clock::now() < give_up) {
    {
      Worker::Hold hold(worker);
      worker.progress_between_calls();
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(held.sent()) << "the worker's thread never took over after the calls stopped";
  if (!held.sent()) {
    Worker::Hold hold(worker);
    worker.not_holding(&held);
  }
}

}  // namespace
}  // namespace weft::transport::ucx

#endif  // WEFT_HAVE_UCX
