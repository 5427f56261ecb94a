// copier.hpp's stand-in: a thread that runs the queued copies in order with memcpy.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/device/copier.hpp"

namespace weft::device {
namespace {

class StandInCopier : public Copier {
 public:
  StandInCopier() : thread_([this] { serve(); }) {}
  ~StandInCopier() override {
    {
      std::lock_guard<std::mutex> lock(holds_->mu);
      holds_->released = holds_->issued;  // no stream waits on a copier that is gone
    }
    holds_->changed.notify_all();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  absl::Status copy(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t height) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(Copy{static_cast<std::byte*>(dst), dst_pitch,
                            static_cast<const std::byte*>(src), src_pitch, width, height, 0});
    }
    changed_.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> mark() override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t m = ++marked_;
    queue_.push_back(Copy{nullptr, 0, nullptr, 0, 0, 0, m});
    changed_.notify_all();
    return m;
  }

  absl::Status wait(uint64_t mark, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    while (passed_ < mark) {
      if (deadline.expired()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "copies between device and host memory did not finish by the deadline (mark ", mark,
            ", passed ", passed_, ")"));
      }
      changed_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return absl::OkStatus();
  }

  absl::Status wait_for_stream(void*, Deadline) override { return absl::OkStatus(); }

  // A ticket's two pieces of work on its StandInStream: one says the stream got there, the
  // next blocks the stream until the ticket is released. They share `holds_` with the
  // copier, so they stay valid should the stream outlive it.
  absl::StatusOr<Ticket> hold(void* stream) override {
    if (stream == nullptr) {
      return absl::InvalidArgumentError(
          "standing in for a GPU (WEFT_DEVICE_STAND_IN), a call ordered on a stream needs a "
          "weft::device::StandInStream");
    }
    uint32_t number = 0;
    {
      std::lock_guard<std::mutex> lock(holds_->mu);
      number = ++holds_->issued;
      holds_->pending.insert(number);  // until the stream gets there
    }
    auto holds = holds_;
    auto* s = static_cast<StandInStream*>(stream);
    s->enqueue([holds, number] {
      std::lock_guard<std::mutex> lock(holds->mu);
      holds->pending.erase(number);
      holds->changed.notify_all();
    });
    s->enqueue([holds, number] {
      std::unique_lock<std::mutex> lock(holds->mu);
      holds->changed.wait(lock, [&] { return static_cast<int32_t>(holds->released - number) >= 0; });
    });
    return Ticket{number, nullptr};
  }

  absl::Status wait_ready(const Ticket& ticket, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(holds_->mu);
    while (holds_->pending.count(ticket.number) != 0) {
      if (deadline.expired()) {
        return absl::DeadlineExceededError(
            "the work queued on the caller's stream before the call did not finish by the "
            "deadline");
      }
      holds_->changed.wait_for(lock, std::chrono::milliseconds(10));
    }
    return absl::OkStatus();
  }

  void release(uint32_t number) override {
    {
      std::lock_guard<std::mutex> lock(holds_->mu);
      holds_->released = number;
    }
    holds_->changed.notify_all();
  }

  absl::StatusOr<std::byte*> host_buffer(size_t bytes) override {
    buffers_.emplace_back(new std::byte[bytes]);
    std::memset(buffers_.back().get(), 0, bytes);
    return buffers_.back().get();
  }

 private:
  struct Copy {
    std::byte* dst;
    size_t dst_pitch;
    const std::byte* src;
    size_t src_pitch, width, height;
    uint64_t mark;  // nonzero: a mark, not a copy
  };

  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopped
      const Copy c = queue_.front();
      queue_.pop_front();
      if (c.mark != 0) {
        passed_ = c.mark;
        changed_.notify_all();
        continue;
      }
      lock.unlock();  // the copy runs while the caller queues more, as on a stream
      for (size_t row = 0; row < c.height; ++row) {
        std::memcpy(c.dst + row * c.dst_pitch, c.src + row * c.src_pitch, c.width);
      }
      lock.lock();
    }
  }

  struct Holds {
    std::mutex mu;
    std::condition_variable changed;
    uint32_t issued = 0, released = 0;
    std::set<uint32_t> pending;  ///< tickets whose stream has not got to them yet
  };
  std::shared_ptr<Holds> holds_ = std::make_shared<Holds>();

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Copy> queue_;
  uint64_t marked_ = 0, passed_ = 0;
  bool stop_ = false;
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace

std::unique_ptr<Copier> stand_in_copier() { return std::make_unique<StandInCopier>(); }

}  // namespace weft::device
