#include "src/engine.hpp"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {

Engine::Engine(device::Copier& copier, Run run)
    : copier_(copier), run_(std::move(run)), thread_([this] { serve(); }) {}

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
  // Held in turn: tickets are numbered in the order the calls queue, and the engine releases
  // them in that order. Only submitters fill the ring, so room found stays room.
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
  auto ticket = copier_.hold(options.stream);
  if (!ticket.ok()) return ticket.status();
  std::lock_guard<std::mutex> lock(mu_);
  Call& call = calls_[tail_ % kMostQueued];
  call.args = args;
  call.options = options;
  call.ticket = *ticket;
  ++tail_;
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status Engine::settle(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (head_ != tail_) {
    if (deadline.expired()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the ", tail_ - head_, " calls ordered on streams before this one did not finish by "
          "the deadline"));
    }
    changed_.wait_for(lock, std::chrono::milliseconds(10));
  }
  return absl::OkStatus();
}

bool Engine::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return head_ != tail_;
}

void Engine::serve() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || head_ != tail_; });
    if (head_ == tail_) return;  // stopped, with nothing left to run
    Call& call = calls_[head_ % kMostQueued];
    lock.unlock();  // the call runs while the caller queues more
    const device::Ticket ticket = call.ticket;
    bool waited = false;
    (void)run_(call.args, call.options, [&](Deadline deadline) {
      waited = true;
      return copier_.wait_ready(ticket, deadline);
    });
    // A call skipped after a failure still hands its mark back (CUDA's: an event).
    if (!waited) (void)copier_.wait_ready(ticket, Deadline::after_ns(0));
    // Failed or not, the stream goes on: a failure is the communicator's async_error.
    copier_.release(ticket.number);
    lock.lock();
    ++head_;
    changed_.notify_all();
  }
}

}  // namespace weft
