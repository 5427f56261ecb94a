#include "tools/diag/outliers.hpp"

#include <algorithm>
#include <map>

namespace weft::tools::diag {

double upper_median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  return values[mid];
}

namespace {

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Latency: the lower median, as for bandwidth the healthy side of a split class is the
// reference (here the fast one).
double lower_median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  return values[mid];
}

}  // namespace

std::vector<std::string> judge(std::vector<Cell>& cells, const OutlierOptions& o) {
  std::map<std::string, std::vector<Cell*>> classes;
  for (Cell& c : cells) classes[c.klass].push_back(&c);
  std::vector<std::string> too_small;
  for (auto& [klass, members] : classes) {
    size_t repeats = 0;
    for (const Cell* c : members) repeats = std::max(repeats, c->repeats.size());
    std::vector<double> bw_refs, lat_refs;
    std::vector<int> slow(members.size(), 0), laggy(members.size(), 0);
    for (size_t k = 0; k < repeats; ++k) {
      std::vector<double> bw, lat;
      for (const Cell* c : members) {
        if (k < c->repeats.size()) {
          bw.push_back(c->repeats[k].bandwidth_GBps);
          lat.push_back(c->repeats[k].latency_us);
        }
      }
      const double bw_ref = upper_median(bw);
      const double lat_ref = lower_median(lat);
      bw_refs.push_back(bw_ref);
      lat_refs.push_back(lat_ref);
      for (size_t m = 0; m < members.size(); ++m) {
        if (k >= members[m]->repeats.size()) continue;
        const Sample& s = members[m]->repeats[k];
        if (s.bandwidth_GBps < o.threshold * bw_ref) ++slow[m];
        if (s.latency_us > lat_ref / o.threshold && s.latency_us > lat_ref + o.latency_floor_us) {
          ++laggy[m];
        }
      }
    }
    const bool judged = static_cast<int>(members.size()) >= o.min_class_cells;
    if (!judged) too_small.push_back(klass);
    for (size_t m = 0; m < members.size(); ++m) {
      Cell& c = *members[m];
      std::vector<double> bw, lat;
      for (const Sample& s : c.repeats) {
        bw.push_back(s.bandwidth_GBps);
        lat.push_back(s.latency_us);
      }
      c.bandwidth_GBps = median_of(bw);
      c.latency_us = median_of(lat);
      c.class_bandwidth_GBps = median_of(bw_refs);
      c.class_latency_us = median_of(lat_refs);
      c.flag.clear();
      const double n = static_cast<double>(std::max<size_t>(c.repeats.size(), 1));
      c.confidence = std::max(slow[m], laggy[m]) / n;
      if (!judged) continue;
      // More than half of the repeats must agree.
      if (2 * slow[m] > static_cast<int>(c.repeats.size())) {
        c.flag = "slow";
        c.confidence = slow[m] / n;
      } else if (2 * laggy[m] > static_cast<int>(c.repeats.size())) {
        c.flag = "high latency";
        c.confidence = laggy[m] / n;
      }
    }
  }
  return too_small;
}

}  // namespace weft::tools::diag
