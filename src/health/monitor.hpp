// The health monitor: one thread per communicator, off the data path, that reads every
// counter source at a set interval, judges each scope with the policy (judge.hpp) and keeps
// the states. Others see them through snapshot() (the API, the endpoint) and the change
// queue (polled by the API; each change also reaches `on_change`, the JSON log).
//
// Nothing here touches the data path: the transports count with LinkCounters (plain
// relaxed stores), and the monitor reads them, and the kernel's socket state, from here.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/base/mutex.hpp"
#include "src/health/judge.hpp"
#include "src/health/policy.hpp"
#include "src/health/sample.hpp"

namespace weft::health {

/// A scope's state as the monitor last judged it, and its counters.
struct ScopeHealth {
  Scope scope;
  State state = State::kHealthy;
  absl::Time since;  ///< when it entered `state` (InfinitePast: never changed)
  Reason reason;     ///< why (empty counter while HEALTHY)
  std::vector<Reading> counters;
  absl::Time read = absl::InfinitePast();  ///< when `counters` were read (wall clock)
};

class Monitor {
 public:
  struct Options {
    int rank = 0;
    absl::Duration interval = absl::Milliseconds(500);
    Policy policy = Policy::defaults();
    /// Called on the monitor's thread for every change, after it is queued.
    std::function<void(const Change&)> on_change;
  };
  /// Changes kept for next_change(); older ones are dropped (and counted) beyond this.
  static constexpr size_t kMaxQueuedChanges = 1024;

  Monitor(Options options, std::vector<std::unique_ptr<Source>> sources);
  ~Monitor();  ///< stops the thread, if started
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  /// Starts the thread: a first reading at once, then one every interval.
  void start();
  /// Thread-safe. While paused the thread reads nothing and sleeps until resumed (or
  /// destroyed): `weft bench --compare health-off` times the same communicator with its
  /// monitor on and off, call block by call block.
  void set_paused(bool paused);
  /// One reading of every source, judged, at `now` (the thread's step; tests call it). The
  /// thread passes the monotonic clock, so that a step of the wall clock cannot cut a window
  /// or a recovery short, and the wall-clock time of the same instant, `wall_now`, which the
  /// changes and states show (InfinitePast: `now` is wall-clock time already).
  void sample_now(absl::Time now, absl::Time wall_now = absl::InfinitePast());

  /// Thread-safe. A state the communicator put a scope in (ISOLATED, PROBATION, and the
  /// HEALTHY that ends a probation: src/isolation.hpp), queued and passed to `on_change` like
  /// the judge's; snapshot() shows it over the judge's state until a HEALTHY is recorded.
  void record(const Change& change);

  std::vector<ScopeHealth> snapshot() const;
  /// The oldest change not yet taken, if any. Thread-safe.
  std::optional<Change> next_change();
  /// Changes dropped because nobody took them (more than kMaxQueuedChanges waiting).
  uint64_t dropped_changes() const;

  int rank() const { return options_.rank; }
  const Policy& policy() const { return options_.policy; }
  absl::Duration interval() const { return options_.interval; }
  std::vector<std::string> source_names() const;

 private:
  void run();

  const Options options_;
  // weft::Mutex, not absl::Mutex: the thread sanitizer sees it (src/base/mutex.hpp).
  mutable Mutex sample_mu_;  // one reading at a time; the sources are not thread-safe
  std::vector<std::unique_ptr<Source>> sources_ ABSL_GUARDED_BY(sample_mu_);
  std::vector<Sample> scratch_ ABSL_GUARDED_BY(sample_mu_);
  mutable Mutex mu_;
  std::condition_variable_any stop_cv_;  // wakes the thread at once when stop_ is set
  std::vector<ScopeJudge> judges_ ABSL_GUARDED_BY(mu_);  // in the order first seen
  std::map<Scope, size_t> judge_of_ ABSL_GUARDED_BY(mu_);  // index in judges_
  std::deque<Change> changes_ ABSL_GUARDED_BY(mu_);
  std::map<Scope, Change> recorded_ ABSL_GUARDED_BY(mu_);  // ISOLATED or PROBATION, by scope
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration wall_offset_ ABSL_GUARDED_BY(mu_);  // wall clock minus the judges' clock
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> source_names_;
  std::thread thread_;
};

}  // namespace weft::health
