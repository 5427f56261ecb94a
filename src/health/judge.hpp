// Judges one scope (a link, rail, GPU, NVLink or port) sample by sample: keeps each
// counter's recent readings, measures them as the policy's rules say, and moves the scope's
// state with hysteresis: up at once when a threshold is crossed, down only after the
// readings have stayed below the current state for the policy's recovery time, so a
// flapping counter does not flap the state.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "src/health/policy.hpp"
#include "src/health/sample.hpp"

namespace weft::health {

/// Why a scope is in its state: the rule that decided, and what it measured.
struct Reason {
  std::string counter;  ///< empty: no rule is above its thresholds
  double value = 0;     ///< the counter's reading
  double measured = 0;  ///< its delta, rate or value, as the rule measures it
  Measure measure = Measure::kDelta;
  std::string per;        ///< kRatio: the counter `measured` is a share of
  double threshold = 0;  ///< the threshold crossed (or, on recovery, the one now under)
  absl::Duration window;
  /// What the communicator did (src/isolation.hpp): the whole reason where no counter
  /// decided, else added after the counter's.
  std::string note;

  std::string text() const;  ///< "tcp_retransmits rate 312.5/s >= 20/s over 5s"
};

struct Change {
  absl::Time time;
  Scope scope;
  State from = State::kHealthy;
  State to = State::kHealthy;
  Reason reason;
};

/// One counter as last read, with its rate over the window (cumulative counters).
struct Reading {
  std::string name;
  double value = 0;
  double rate = 0;
  CounterKind kind = CounterKind::kCumulative;
};

class ScopeJudge {
 public:
  explicit ScopeJudge(Scope scope) : scope_(std::move(scope)) {}

  /// Takes one sample of this scope; returns the state change it causes, if any.
  std::optional<Change> observe(const Sample& sample, const Policy& policy);

  const Scope& scope() const { return scope_; }
  State state() const { return state_; }
  absl::Time since() const { return since_; }
  const Reason& reason() const { return reason_; }
  std::vector<Reading> readings() const;
  /// When the latest sample was taken (InfinitePast: none yet).
  absl::Time last_read() const { return last_time_; }

 private:
  struct Point {
    absl::Time time;
    double value;
  };
  struct History {
    CounterKind kind = CounterKind::kCumulative;
    std::deque<Point> points;  // oldest first; the first is the window's baseline
  };
  /// The reading a window that starts at `start` measures `h` from.
  static const Point& baseline(const History& h, absl::Time start);
  /// How much `h` grew since the window that starts at `start`, and over how many seconds.
  static std::pair<double, double> growth(const History& h, absl::Time start);
  /// What `rule` says of `h` now: the level and why.
  std::pair<State, Reason> judge(const Rule& rule, const History& h, const Policy& policy) const;

  Scope scope_;
  State state_ = State::kHealthy;
  absl::Time since_ = absl::InfinitePast();
  Reason reason_;
  std::map<std::string, History, std::less<>> counters_;
  absl::Time last_time_ = absl::InfinitePast();  // of the previous sample
  std::optional<absl::Time> below_since_;  // readings under state_ since then
  Reason below_reason_;                    // the highest of them, for the change's reason
  State below_level_ = State::kHealthy;
};

}  // namespace weft::health
