#include "src/health/link_source.hpp"

#include <algorithm>

namespace weft::health {

int LinkSource::rail_of(std::string_view ifname, int order) const {
  const auto it = std::find(rail_ifnames_.begin(), rail_ifnames_.end(), ifname);
  // Past the listed rails for one that is not listed, so the two never share a number.
  return static_cast<int>(it - rail_ifnames_.begin()) + (it == rail_ifnames_.end() ? order : 0);
}

void LinkSource::sample(absl::Time now, std::vector<Sample>& out) {
  walk_([&](const LinkView& view) {
    const size_t begin = out.size();
    // A link's counters, weft's own and its sockets', count from the link's birth: one that
    // appears after the scope's first reading (a link made lazily) was zero before.
    const auto born_here = [&] {
      for (size_t i = begin; i < out.size(); ++i) {
        for (Counter& c : out[i].counters) c.counted_here = true;
      }
    };
    Sample link{Scope{.kind = ScopeKind::kLink, .peer = view.peer, .device = std::string(view.transport)},
                now, {}};
    link.counters.push_back({"link_failed_connects", static_cast<double>(view.failed_connects)});
    if (view.pair == nullptr) {
      out.push_back(std::move(link));
      return born_here();
    }
    const transport::PairStats stats = view.pair->stats();
    link.counters.push_back({"link_stalls", static_cast<double>(view.pair->stalls())});
    link.counters.push_back({"link_errors", static_cast<double>(stats.errors)});
    link.counters.push_back({"link_bytes_sent", static_cast<double>(stats.bytes_sent)});
    link.counters.push_back({"link_bytes_received", static_cast<double>(stats.bytes_received)});
    link.counters.push_back({"link_path_failures", static_cast<double>(stats.path_failures)});
    link.counters.push_back({"link_resumptions", static_cast<double>(stats.resumptions)});
    link.counters.push_back({"link_bytes_resent", static_cast<double>(stats.bytes_resent)});
    link.counters.push_back({"link_checksum_errors", static_cast<double>(stats.checksum_errors)});
    // One sample per path, in the order the link names them; cumulative path counters also
    // add up on the link.
    const size_t first_rail = out.size() + 1;  // out gets the link's sample first
    out.push_back(std::move(link));
    int rails = 0, rails_down = 0;
    view.pair->read_path_counters([&](std::string_view path, std::string_view counter,
                                      double value, bool cumulative) {
      if (counter == "path_down") {
        ++rails;
        rails_down += value > 0;
      }
      Sample* rail = nullptr;
      for (size_t i = first_rail; i < out.size(); ++i) {
        if (out[i].scope.device == path) rail = &out[i];
      }
      if (rail == nullptr) {
        const int order = static_cast<int>(out.size() - first_rail);
        rail = &out.emplace_back(Sample{Scope{.kind = ScopeKind::kRail, .peer = view.peer,
                                              .rail = rail_of(path, order),
                                              .device = std::string(path)},
                                        now, {}});
      }
      const CounterKind kind = cumulative ? CounterKind::kCumulative : CounterKind::kGauge;
      rail->counters.push_back({std::string(counter), value, kind});
      if (!cumulative) return;
      std::vector<Counter>& sums = out[first_rail - 1].counters;
      auto sum = std::find_if(sums.begin(), sums.end(),
                              [&](const Counter& c) { return c.name == counter; });
      if (sum == sums.end()) sums.push_back({std::string(counter), value});
      else sum->value += value;
    });
    // A level on the link: every rail's own path is dead, so the link goes on through a path
    // a third rank relays (or not at all). A rail alone FAILING moves its stripes to the
    // other rails; with none left the link itself must leave the ring.
    if (rails > 0) {
      out[first_rail - 1].counters.push_back(
          {"link_every_rail_down", rails_down == rails ? 1.0 : 0.0, CounterKind::kGauge});
    }
    born_here();
  });
}

}  // namespace weft::health
