// The health policy: per counter, a rule that turns a reading into a state. A rule takes
// the counter's delta or its rate over a window (cumulative counters) or its value (gauges)
// and compares it with two thresholds, SUSPECT and FAILING. Defaults come from the tools
// operators already trust (DCGM for GPUs and NVLink, ibqueryerrors for InfiniBand), each
// cited in policy.cc; every threshold is settable through a policy file
// (WEFT_HEALTH_POLICY) and the environment (WEFT_HEALTH_THRESHOLDS), in that order.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/base/env.hpp"

namespace weft::health {

/// A link's, rail's, GPU's or port's state. The judge gives the first three from counters;
/// ISOLATED and PROBATION are what the communicator did about FAILING (src/isolation.hpp).
enum class State : int { kHealthy = 0, kSuspect = 1, kFailing = 2, kIsolated = 3, kProbation = 4 };
const char* state_name(State s);  // "HEALTHY", "SUSPECT", "FAILING", "ISOLATED", "PROBATION"

enum class Measure : int {
  kDelta = 0,  ///< how much a cumulative counter grew over the window
  kRate = 1,   ///< that growth per second
  kValue = 2,  ///< a gauge's current value
  /// how much a cumulative counter grew over the window, as a share of how much another of
  /// the same scope grew (retransmitted segments per segment sent): judged only once the
  /// other grew by at least `min_per`, so a nearly idle link is not judged on a handful
  kRatio = 3,
};
const char* measure_name(Measure m);  // "delta", "rate", "value", "ratio"

inline constexpr double kNever = std::numeric_limits<double>::infinity();

struct Rule {
  std::string counter;          ///< the counter's name, e.g. "nvlink_crc_flit"
  Measure measure = Measure::kDelta;
  double suspect = kNever;      ///< at or above: SUSPECT (kNever: never)
  double failing = kNever;      ///< at or above: FAILING
  absl::Duration window = absl::ZeroDuration();  ///< zero: the policy's window
  std::string anchor;           ///< where the default comes from, for `weft info`
  std::string per;              ///< kRatio: the counter it is a share of
  double min_per = 0;           ///< kRatio: least growth of `per` to judge by
};

struct Policy {
  absl::Duration window = absl::Seconds(5);    ///< default window of every rule
  /// A state steps down only after the readings have stayed below it this long.
  absl::Duration recover = absl::Seconds(10);
  std::vector<Rule> rules;

  /// The built-in rules (policy.cc says where each threshold comes from).
  static Policy defaults();
  /// defaults(), then the policy file, then WEFT_HEALTH_THRESHOLDS, with the window and
  /// recovery times of `config`; errors name the setting and what is wrong.
  static absl::StatusOr<Policy> from_config(const Config& config);

  /// The rule for `counter`, or null: counters without a rule are shown, never judged.
  const Rule* rule_for(std::string_view counter) const;
  absl::Duration window_of(const Rule& rule) const;
  /// The longest window of any rule: how much history a counter keeps at most.
  absl::Duration longest_window() const;

  /// Applies "COUNTER=SUSPECT/FAILING[/WINDOW_S],...": '-' is no threshold; a counter
  /// without a rule gets one that measures its rate.
  absl::Status apply_overrides(std::string_view text);
  /// Applies a JSON policy (docs/HEALTH.md): {"window_s", "recover_s", "rules": {COUNTER:
  /// {"measure", "suspect", "failing", "window_s"}}}; `origin` names it in errors.
  absl::Status apply_json(std::string_view json, std::string_view origin);

  /// One line per rule, for `weft info`.
  std::vector<std::string> describe() const;
};

}  // namespace weft::health
