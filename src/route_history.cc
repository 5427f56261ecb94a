#include "src/route_history.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "src/health/json.hpp"

namespace weft {

void RouteHistory::record(const Route& route, const std::string& line, absl::Time when) {
  std::vector<std::pair<int, int>> links;
  route.isolated().for_each([&links](int a, int b) { links.emplace_back(a, b); });
  std::sort(links.begin(), links.end());
  absl::MutexLock lock(&mu_);
  epoch_ = route.epoch();
  ring_ = route.schedule().ring();
  links_ = std::move(links);
  rails_.assign(route.isolated_rails().begin(), route.isolated_rails().end());
  if (!line.empty()) {
    if (changes_.size() == kKeep) changes_.erase(changes_.begin());
    changes_.push_back({when, epoch_, line});
  }
}

std::string RouteHistory::json() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json j = {{"rank", rank_}, {"epoch", epoch_}, {"ring", ring_},
                      {"isolated_links", links_}, {"isolated_rails", rails_}};
  nlohmann::json changes = nlohmann::json::array();
  for (const Change& c : changes_) {
    changes.push_back({{"time", health::iso_time(c.time)},
                       {"epoch", c.epoch},
                       {"change", c.line}});
  }
  j["changes"] = std::move(changes);
  return j.dump();
}

}  // namespace weft
