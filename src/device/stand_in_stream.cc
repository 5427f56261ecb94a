// copier.hpp's StandInStream: a thread that runs queued work in order, as a CUDA stream runs
// its kernels and copies, for the tests of calls ordered on a stream where there is no GPU.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "src/device/copier.hpp"

namespace weft::device {

struct StandInStream::State {
  std::mutex mu;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0, ran = 0;
  bool stop = false;
  std::thread thread;

  void serve() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      changed.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopped, with nothing left to run
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      lock.unlock();  // work may block (a held call), while more is queued
      work();
      lock.lock();
      ++ran;
      changed.notify_all();
    }
  }
};

StandInStream::StandInStream() : state_(std::make_shared<State>()) {
  state_->thread = std::thread([s = state_.get()] { s->serve(); });
}

StandInStream::~StandInStream() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->changed.notify_all();
  state_->thread.join();
}

void StandInStream::enqueue(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->queue.push_back(std::move(work));
    ++state_->queued;
  }
  state_->changed.notify_all();
}

void StandInStream::synchronize() {
  std::unique_lock<std::mutex> lock(state_->mu);
  const uint64_t target = state_->queued;
  state_->changed.wait(lock, [&] { return state_->ran >= target; });
}

}  // namespace weft::device
