#include "tools/diag/observe.hpp"

#include <map>
#include <string>

namespace weft::tools::diag {

nlohmann::json scope_json(const HealthScope& s) {
  nlohmann::json j = {{"kind", s.kind}, {"name", s.name}};
  if (s.peer >= 0) j["peer"] = s.peer;
  if (s.rail >= 0) j["rail"] = s.rail;
  if (s.gpu >= 0) j["gpu"] = s.gpu;
  if (s.link >= 0) j["link"] = s.link;
  if (!s.device.empty()) j["device"] = s.device;
  return j;
}

nlohmann::json observe(Communicator& comm, const std::vector<LinkHealth>* earlier) {
  // The worst state each counter of each scope took it to: a state steps down only after
  // WEFT_HEALTH_RECOVER, but the worst is what the verdict is about.
  std::map<std::pair<std::string, std::string>, HealthChange> worst;
  while (auto change = comm.next_health_change()) {
    const auto key = std::make_pair(change->scope.name, change->counter);
    auto it = worst.find(key);
    if (it == worst.end() || change->to > it->second.to) worst[key] = *change;
  }
  std::map<std::string, const LinkHealth*> before;
  if (earlier != nullptr) {
    for (const LinkHealth& h : *earlier) before[h.scope.name] = &h;
  }
  nlohmann::json scopes = nlohmann::json::array();
  for (const LinkHealth& h : comm.health()) {
    nlohmann::json j = scope_json(h.scope);
    j["now"] = health_state_name(h.state);
    nlohmann::json why = nlohmann::json::array();
    bool explained = h.state == HealthState::kHealthy;
    for (const auto& [key, c] : worst) {
      if (key.first != h.scope.name || c.to == HealthState::kHealthy) continue;
      why.push_back({{"state", health_state_name(c.to)}, {"counter", c.counter},
                     {"measure", c.measure}, {"measured", c.measured},
                     {"threshold", c.threshold}, {"reason", c.reason}});
      explained |= c.to >= h.state;
    }
    // A state whose change was dropped (more than the monitor keeps) still counts.
    if (!explained) why.push_back({{"state", health_state_name(h.state)}, {"reason", h.reason}});
    j["why"] = std::move(why);
    nlohmann::json counters = nlohmann::json::array();
    const LinkHealth* then = before.count(h.scope.name) ? before[h.scope.name] : nullptr;
    // Over the time between the two readings, which the monitor takes on its own ticks: not
    // the interval slept, which may hold one reading twice or three apart.
    const double seconds = then == nullptr ? 0 : absl::ToDoubleSeconds(h.read - then->read);
    for (const HealthCounter& c : h.counters) {
      nlohmann::json cj = {{"name", c.name}, {"value", c.value}, {"cumulative", c.cumulative}};
      if (c.cumulative) cj["rate"] = c.rate;
      if (c.cumulative && seconds > 0) {
        for (const HealthCounter& p : then->counters) {
          if (p.name != c.name) continue;
          if (c.value >= p.value) {
            cj["rate_interval"] = (c.value - p.value) / seconds;
          } else {
            cj["reset_in_interval"] = true;  // went down: cleared, not a negative rate
          }
        }
      }
      counters.push_back(std::move(cj));
    }
    j["counters"] = std::move(counters);
    scopes.push_back(std::move(j));
  }
  return {{"rank", comm.rank()}, {"scopes", std::move(scopes)}};
}

}  // namespace weft::tools::diag
