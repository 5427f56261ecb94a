#include "src/health/judge.hpp"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft::health {

std::string Reason::text() const {
  if (counter.empty()) return note.empty() ? "no counter above its thresholds" : note;
  std::string out;
  if (measure == Measure::kRatio) {
    out = absl::StrFormat("%s %s %g%% %s %g%% of %s over %gs", counter, measure_name(measure),
                          measured * 100, measured >= threshold ? ">=" : "<", threshold * 100,
                          per, absl::ToDoubleSeconds(window));
  } else {
    const char* per_s = measure == Measure::kRate ? "/s" : "";
    const char* cmp = measured >= threshold ? ">=" : "<";
    if (measure == Measure::kValue) {
      out = absl::StrFormat("%s value %g %s %g", counter, measured, cmp, threshold);
    } else {
      out = absl::StrFormat("%s %s %g%s %s %g%s over %gs", counter, measure_name(measure),
                            measured, per_s, cmp, threshold, per_s,
                            absl::ToDoubleSeconds(window));
    }
  }
  if (!note.empty()) absl::StrAppend(&out, "; ", note);
  return out;
}

const ScopeJudge::Point& ScopeJudge::baseline(const History& h, absl::Time start) {
  // The newest reading at or before the window's start, else the oldest.
  const Point* base = &h.points.front();
  for (const Point& p : h.points) {
    if (p.time > start) break;
    base = &p;
  }
  return *base;
}

std::pair<double, double> ScopeJudge::growth(const History& h, absl::Time start) {
  const Point& base = baseline(h, start);
  return {h.points.back().value - base.value,
          absl::ToDoubleSeconds(h.points.back().time - base.time)};
}

std::pair<State, Reason> ScopeJudge::judge(const Rule& rule, const History& h,
                                           const Policy& policy) const {
  Reason r;
  r.counter = rule.counter;
  r.measure = rule.measure;
  r.per = rule.per;
  r.window = policy.window_of(rule);
  const Point& last = h.points.back();
  r.value = last.value;
  const absl::Time start = last.time - r.window;
  if (rule.measure == Measure::kValue) {
    r.measured = last.value;
  } else if (rule.measure == Measure::kRatio) {
    const auto per = counters_.find(rule.per);
    double of = 0, grew = 0;
    if (per != counters_.end() && !per->second.points.empty()) {
      // Both over the same span: a counter that started over (reset) has a later baseline
      // than the other, and growths over different spans make no ratio.
      const absl::Time from = std::max(baseline(h, start).time, baseline(per->second, start).time);
      of = growth(per->second, from).first;
      grew = growth(h, from).first;
    }
    r.measured = of >= std::max(rule.min_per, 1e-9) ? grew / of : 0;
  } else {
    const auto [delta, seconds] = growth(h, start);
    r.measured = rule.measure == Measure::kDelta ? delta : (seconds > 0 ? delta / seconds : 0);
  }
  if (r.measured >= rule.failing) {
    r.threshold = rule.failing;
    return {State::kFailing, r};
  }
  if (r.measured >= rule.suspect) {
    r.threshold = rule.suspect;
    return {State::kSuspect, r};
  }
  r.threshold = rule.suspect != kNever ? rule.suspect : rule.failing;
  return {State::kHealthy, r};
}

std::optional<Change> ScopeJudge::observe(const Sample& sample, const Policy& policy) {
  // Record the readings, keeping per counter what the longest window needs: a counter may be
  // another rule's `per` (a ratio's denominator), so every counter keeps that much.
  const absl::Duration keep = policy.longest_window();
  for (const Counter& c : sample.counters) {
    auto [it, added] = counters_.try_emplace(c.name);
    History& h = it->second;
    h.kind = c.kind;
    // An event counter weft counts itself that appears after the scope's first reading (an
    // XID never seen before) was zero at the reading before: its first events count. Any
    // other first reading is only a baseline, since what it held when the job started (or
    // when its read first succeeded) says nothing about now.
    if (added && c.counted_here && c.kind == CounterKind::kCumulative &&
        last_time_ != absl::InfinitePast()) {
      h.points.push_back({last_time_, 0});
    }
    // A cumulative counter that went down was reset (a cleared port counter, a restarted
    // driver): start over from here rather than see a negative delta.
    if (c.kind == CounterKind::kCumulative && !h.points.empty() && c.value < h.points.back().value) {
      h.points.clear();
    }
    h.points.push_back({sample.time, c.value});
    while (h.points.size() > 2 && h.points[1].time <= sample.time - keep) h.points.pop_front();
  }
  last_time_ = sample.time;
  // The level the rules give now: the worst of them, and the first rule that gives it.
  State level = State::kHealthy;
  Reason why;
  for (const auto& [name, h] : counters_) {
    const Rule* rule = policy.rule_for(name);
    if (rule == nullptr || h.points.empty()) continue;
    auto [l, r] = judge(*rule, h, policy);
    if (l > level) level = l, why = r;
  }
  if (level > state_ || (level == state_ && level > State::kHealthy)) below_since_.reset();
  if (level > state_) {
    Change change{sample.time, scope_, state_, level, why};
    state_ = level, since_ = sample.time, reason_ = why;
    return change;
  }
  if (level == state_) {
    if (level > State::kHealthy) reason_ = why;  // the latest measurement of the same cause
    return std::nullopt;
  }
  // Below the current state: step down once that has lasted the recovery time.
  if (!below_since_) {
    below_since_ = sample.time;
    below_level_ = level;
    below_reason_ = why;
  } else if (level >= below_level_) {
    below_level_ = level;
    below_reason_ = why;
  }
  if (sample.time - *below_since_ < policy.recover) return std::nullopt;
  // The recovery reason names the counter that put the scope here, now under its threshold.
  Reason recovered = below_level_ > State::kHealthy ? below_reason_ : reason_;
  if (below_level_ == State::kHealthy) {
    if (const Rule* rule = policy.rule_for(reason_.counter); rule != nullptr) {
      auto it = counters_.find(reason_.counter);
      if (it != counters_.end() && !it->second.points.empty()) {
        recovered = judge(*rule, it->second, policy).second;
      }
    }
  }
  Change change{sample.time, scope_, state_, below_level_, recovered};
  state_ = below_level_, since_ = sample.time, reason_ = recovered;
  below_since_.reset();
  if (state_ == State::kHealthy) reason_ = Reason{};
  return change;
}

std::vector<Reading> ScopeJudge::readings() const {
  std::vector<Reading> out;
  for (const auto& [name, h] : counters_) {
    if (h.points.empty()) continue;
    Reading r{name, h.points.back().value, 0, h.kind};
    if (h.kind == CounterKind::kCumulative && h.points.size() >= 2) {
      const double seconds = absl::ToDoubleSeconds(h.points.back().time - h.points.front().time);
      if (seconds > 0) r.rate = (h.points.back().value - h.points.front().value) / seconds;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace weft::health
