#include "src/link_tender.hpp"

#include <pthread.h>

#include <chrono>
#include <utility>

namespace weft::detail {

LinkTender::LinkTender(CallMutex* calls, std::function<bool()> tend)
    : calls_(calls), tend_(std::move(tend)), thread_([this] { run(); }) {}

LinkTender::~LinkTender() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_one();
  thread_.join();
}

void LinkTender::run() {
  pthread_setname_np(pthread_self(), "weft-links");
  const auto busy = absl::ToChronoMicroseconds(kTendInterval);
  const auto idle = absl::ToChronoMicroseconds(kIdleInterval);
  auto interval = idle;
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stop_; })) {
    interval = idle;
    if (!calls_->try_lock()) continue;  // a call runs: its waits tend the links
    if (tend_()) interval = busy;
    calls_->unlock();
  }
}

}  // namespace weft::detail
