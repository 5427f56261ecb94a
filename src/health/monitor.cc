#include "src/health/monitor.hpp"

#include <pthread.h>

#include <chrono>
#include <utility>

#include "src/base/deadline.hpp"

namespace weft::health {

Monitor::Monitor(Options options, std::vector<std::unique_ptr<Source>> sources)
    : options_(std::move(options)), sources_(std::move(sources)) {
  for (const auto& s : sources_) source_names_.emplace_back(s->name());
}

Monitor::~Monitor() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Monitor::start() {
  thread_ = std::thread([this] { run(); });
  // Named, so that top -H and scripts/health-overhead can find it and what it costs.
  pthread_setname_np(thread_.native_handle(), "weft-health");
}

void Monitor::run() {
  const auto interval = absl::ToChronoNanoseconds(options_.interval);
  auto next = std::chrono::steady_clock::now();  // the first reading at once
  while (true) {
    {
      // Until the next reading is due, then for as long as it is paused; a reading that fell
      // due during a pause is taken on resuming.
      std::unique_lock<Mutex> lock(mu_);
      if (stop_cv_.wait_until(lock, next, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return stop_;
          })) {
        return;
      }
      stop_cv_.wait(lock, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || !paused_; });
      if (stop_) return;
    }
    // Judged on the monotonic clock; shown on the wall clock (people compare it across hosts).
    sample_now(monotonic_now(), absl::Now());
    next = std::chrono::steady_clock::now() + interval;
  }
}

void Monitor::set_paused(bool paused) {
  {
    MutexLock lock(&mu_);
    paused_ = paused;
  }
  stop_cv_.notify_all();
}

void Monitor::sample_now(absl::Time now, absl::Time wall_now) {
  MutexLock sampling(&sample_mu_);
  const absl::Duration offset =
      wall_now == absl::InfinitePast() ? absl::ZeroDuration() : wall_now - now;
  scratch_.clear();
  for (auto& source : sources_) source->sample(now, scratch_);
  std::vector<Change> changes;
  {
    MutexLock lock(&mu_);
    wall_offset_ = offset;
    for (const Sample& sample : scratch_) {
      auto [it, added] = judge_of_.try_emplace(sample.scope, judges_.size());
      if (added) judges_.emplace_back(sample.scope);
      if (auto change = judges_[it->second].observe(sample, options_.policy)) {
        change->time += offset;
        changes.push_back(*change);
        changes_.push_back(*std::move(change));
        if (changes_.size() > kMaxQueuedChanges) changes_.pop_front(), ++dropped_;
      }
    }
  }
  if (options_.on_change) {
    for (const Change& c : changes) options_.on_change(c);
  }
}

void Monitor::record(const Change& change) {
  {
    MutexLock lock(&mu_);
    if (change.to == State::kIsolated || change.to == State::kProbation) {
      recorded_[change.scope] = change;
    } else {
      recorded_.erase(change.scope);
    }
    changes_.push_back(change);
    if (changes_.size() > kMaxQueuedChanges) changes_.pop_front(), ++dropped_;
  }
  if (options_.on_change) options_.on_change(change);
}

std::vector<ScopeHealth> Monitor::snapshot() const {
  MutexLock lock(&mu_);
  std::vector<ScopeHealth> out;
  out.reserve(judges_.size());
  for (const ScopeJudge& j : judges_) {
    const absl::Time since =
        j.since() == absl::InfinitePast() ? j.since() : j.since() + wall_offset_;
    const absl::Time read = j.last_read() == absl::InfinitePast()
                                ? j.last_read()
                                : j.last_read() + wall_offset_;
    out.push_back({j.scope(), j.state(), since, j.reason(), j.readings(), read});
    if (auto it = recorded_.find(j.scope()); it != recorded_.end()) {
      out.back().state = it->second.to;
      out.back().since = it->second.time;
      out.back().reason = it->second.reason;
    }
  }
  return out;
}

std::optional<Change> Monitor::next_change() {
  MutexLock lock(&mu_);
  if (changes_.empty()) return std::nullopt;
  Change c = std::move(changes_.front());
  changes_.pop_front();
  return c;
}

uint64_t Monitor::dropped_changes() const {
  MutexLock lock(&mu_);
  return dropped_;
}

std::vector<std::string> Monitor::source_names() const { return source_names_; }

}  // namespace weft::health
