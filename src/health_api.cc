#include "src/health_api.hpp"

namespace weft {

const char* health_state_name(HealthState state) {
  return health::state_name(static_cast<health::State>(static_cast<int>(state)));
}

namespace detail {
namespace {

HealthScope public_scope(const health::Scope& s) {
  return HealthScope{std::string(health::scope_kind_name(s.kind)), s.name(), s.peer, s.rail,
                     s.gpu, s.link, s.device};
}

HealthState public_state(health::State s) { return static_cast<HealthState>(static_cast<int>(s)); }

}  // namespace

std::vector<LinkHealth> health_of(const health::Monitor* monitor) {
  std::vector<LinkHealth> out;
  if (monitor == nullptr) return out;
  for (const health::ScopeHealth& s : monitor->snapshot()) {
    LinkHealth h;
    h.scope = public_scope(s.scope);
    h.state = public_state(s.state);
    h.since = s.since;
    h.read = s.read;
    if (!s.reason.counter.empty()) h.reason = s.reason.text();
    for (const health::Reading& r : s.counters) {
      h.counters.push_back({r.name, r.value, r.rate, r.kind == health::CounterKind::kCumulative});
    }
    out.push_back(std::move(h));
  }
  return out;
}

std::optional<HealthChange> next_change_of(health::Monitor* monitor) {
  if (monitor == nullptr) return std::nullopt;
  auto c = monitor->next_change();
  if (!c) return std::nullopt;
  HealthChange h;
  h.time = c->time;
  h.scope = public_scope(c->scope);
  h.from = public_state(c->from);
  h.to = public_state(c->to);
  h.counter = c->reason.counter;
  h.value = c->reason.value;
  h.measured = c->reason.measured;
  h.measure = std::string(health::measure_name(c->reason.measure));
  h.threshold = c->reason.threshold;
  h.window = c->reason.window;
  h.reason = c->reason.text();
  return h;
}

}  // namespace detail
}  // namespace weft
