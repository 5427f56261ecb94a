#include "src/engine.hpp"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {

Engine::Engine(device::Copier& copier, Queue queue, Run run)
    : copier_(copier), queue_(std::move(queue)), run_(std::move(run)), thread_([this] { serve(); }) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

absl::Status Engine::submit(const CollectiveArgs& args, const CallOptions& options,
                            Deadline deadline) {
  // In turn: pieces are numbered, and their stream sides queued, in the order calls come.
  // Only submitters fill the ring, so room found stays room.
  std::lock_guard<std::mutex> turn(submit_mu_);
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (tail_ - head_ == kMostQueued) {
      if (deadline.expired()) {
        return absl::DeadlineExceededError(absl::StrCat(
            kMostQueued, " calls ordered on streams were still queued at the deadline: the "
            "oldest has not finished (are the other ranks making their calls?)"));
      }
      changed_.wait_for(lock, std::chrono::milliseconds(10));
    }
  }
  if (!broken_.ok()) return broken_;
  const uint32_t first = next_;
  Call call{args, options, Plan{.first = first}, absl::OkStatus()};
  call.queued = queue_(args, options, call.plan);
  next_ += call.plan.pieces;
  if (!call.queued.ok()) {
    broken_ = absl::FailedPreconditionError(absl::StrCat(
        "an earlier call ordered on a stream could not be queued (", call.queued.message(),
        "); destroy this communicator and create a new one"));
  }
  absl::Status queued = call.queued;
  std::lock_guard<std::mutex> lock(mu_);
  broken_call_ |= !queued.ok();
  calls_[tail_ % kMostQueued] = std::move(call);
  ++tail_;
  last_ = next_ - 1;
  changed_.notify_all();
  return queued;
}

absl::Status Engine::settle(Deadline deadline, bool copied_out) {
  std::unique_lock<std::mutex> lock(mu_);
  // A call whose stream side failed to queue may never copy out: nothing to wait for.
  if (broken_call_) copied_out = false;
  while (head_ != tail_ ||
         (copied_out && !device::reached(copier_.read(device::Word::kOut), last_))) {
    if (deadline.expired()) {
      return absl::DeadlineExceededError(
          head_ != tail_
              ? absl::StrCat("the ", tail_ - head_,
                             " calls ordered on streams before this one did not finish by the "
                             "deadline")
              : std::string("the streams of the calls before this one did not copy their "
                            "results out by the deadline"));
    }
    changed_.wait_for(lock, std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void Engine::serve() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || head_ != tail_; });
    if (head_ == tail_) return;  // stopped, with nothing left to run
    Call& call = calls_[head_ % kMostQueued];
    lock.unlock();  // the call runs while the caller queues more
    const absl::Status s = run_(call.args, call.options, call.plan, call.queued);
    // Failed or not, the stream goes on past every piece of the call: a failure is the
    // communicator's async_error, and the results are not to be used. Past a failure the
    // stream no longer writes into this rank's cuda_ipc window (kStop): peers whose call
    // passed may still read it.
    if (!s.ok()) copier_.write(device::Word::kStop, 1);
    copier_.write(device::Word::kDone, call.plan.first + call.plan.pieces - 1);
    lock.lock();
    ++head_;
    changed_.notify_all();
  }
}

}  // namespace weft
