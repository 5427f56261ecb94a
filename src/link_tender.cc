#include "src/link_tender.hpp"

#include <pthread.h>

#include <chrono>
#include <utility>

namespace weft::detail {

LinkTender::LinkTender(Mutex* calls, std::function<void()> tend)
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
  const auto interval = absl::ToChronoMicroseconds(kTendInterval);
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, interval, [this] { return stop_; })) {
    if (!calls_->try_lock()) continue;  // a call runs: its waits tend the links
    tend_();
    calls_->unlock();
  }
}

}  // namespace weft::detail
