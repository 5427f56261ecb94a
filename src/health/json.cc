#include "src/health/json.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace weft::health {
std::string iso_time(absl::Time t) {
  if (t == absl::InfinitePast()) return "";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

namespace {

// The scope's fields that apply to its kind (the others are -1 or empty).
void put_scope(nlohmann::json& j, const Scope& s) {
  j["scope"] = s.name();
  j["kind"] = std::string(scope_kind_name(s.kind));
  if (s.peer >= 0) j["peer"] = s.peer;
  if (s.rail >= 0) j["rail"] = s.rail;
  if (s.gpu >= 0) j["gpu"] = s.gpu;
  if (s.link >= 0) j["link"] = s.link;
  if (!s.device.empty()) j["device"] = s.device;
}

// JSON has no infinity: a threshold that is never reached is null.
nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

void put_reason(nlohmann::json& j, const Reason& r) {
  if (r.counter.empty()) return;
  j["counter"] = r.counter;
  j["value"] = number(r.value);
  j["measure"] = std::string(measure_name(r.measure));
  j[r.measure == Measure::kValue ? "level" : std::string(measure_name(r.measure))] =
      number(r.measured);
  j["threshold"] = number(r.threshold);
  if (r.measure == Measure::kRatio) j["per"] = r.per;
  if (r.measure != Measure::kValue) j["window_s"] = absl::ToDoubleSeconds(r.window);
}

}  // namespace

std::string change_json_line(int rank, const Change& change) {
  nlohmann::json j;
  j["event"] = "weft_health_change";
  j["time"] = iso_time(change.time);
  j["rank"] = rank;
  put_scope(j, change.scope);
  put_reason(j, change.reason);
  j["from"] = std::string(state_name(change.from));
  j["to"] = std::string(state_name(change.to));
  j["reason"] = change.reason.text();
  // Interface names and bus ids come from the system: replace a byte that is not UTF-8
  // rather than throw on the monitor's thread.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string health_json(int rank, const std::vector<ScopeHealth>& scopes, absl::Time now) {
  nlohmann::json j;
  j["rank"] = rank;
  j["time"] = iso_time(now);
  nlohmann::json list = nlohmann::json::array();
  for (const ScopeHealth& s : scopes) {
    nlohmann::json e;
    put_scope(e, s.scope);
    e["state"] = std::string(state_name(s.state));
    e["since"] = iso_time(s.since);
    if (!s.reason.counter.empty() || !s.reason.note.empty()) {
      // What the communicator did (ISOLATED, PROBATION) may have no counter: its note.
      nlohmann::json why;
      put_reason(why, s.reason);
      why["text"] = s.reason.text();
      e["reason"] = why;
    }
    nlohmann::json counters = nlohmann::json::object();
    for (const Reading& r : s.counters) {
      nlohmann::json c{{"value", number(r.value)}};
      if (r.kind == CounterKind::kCumulative) c["rate"] = number(r.rate);
      counters[r.name] = c;
    }
    e["counters"] = counters;
    list.push_back(std::move(e));
  }
  j["scopes"] = std::move(list);
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace weft::health
