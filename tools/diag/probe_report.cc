#include "tools/diag/probe_report.hpp"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace weft::tools::diag {
namespace {

std::string human_bytes(size_t b) {
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) return absl::StrCat(b >> 30, " GiB");
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return absl::StrCat(b >> 20, " MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

std::string rank_name(const ProbeResult& r, int rank) {
  return absl::StrCat(rank, " (", r.hosts[rank], ")");
}

const Cell* find(const ProbeResult& r, int from, int to, int path) {
  for (const Cell& c : r.cells) {
    if (c.from == from && c.to == to && c.path == path) return &c;
  }
  return nullptr;
}

// One matrix: rows from, columns to; `value` picks what a cell shows.
template <typename Value>
void matrix(std::string& out, const ProbeResult& r, int path, const char* what, Value value) {
  absl::StrAppend(&out, "# ", r.paths[path], ": ", what, ", from (row) to (column); * flagged\n");
  absl::StrAppendFormat(&out, "%-12s", "");
  for (int to = 0; to < r.ranks; ++to) absl::StrAppendFormat(&out, " %11s", rank_name(r, to));
  out += "\n";
  for (int from = 0; from < r.ranks; ++from) {
    absl::StrAppendFormat(&out, "%-12s", rank_name(r, from));
    for (int to = 0; to < r.ranks; ++to) {
      const Cell* c = find(r, from, to, path);
      absl::StrAppendFormat(&out, " %11s", c == nullptr ? "-" : value(*c));
    }
    out += "\n";
  }
}

std::string mark(const Cell& c, const char* flag) { return c.flag == flag ? "*" : " "; }

// Flagged cells grouped into links: both directions of a pair over one path.
std::map<std::tuple<int, int, int>, std::vector<const Cell*>> flagged_links(const ProbeResult& r) {
  std::map<std::tuple<int, int, int>, std::vector<const Cell*>> links;
  for (const Cell& c : r.cells) {
    if (c.flag.empty()) continue;
    links[{std::min(c.from, c.to), std::max(c.from, c.to), c.path}].push_back(&c);
  }
  return links;
}

std::string cell_reason(const Cell& c, double threshold) {
  const int outliers = static_cast<int>(c.confidence * c.repeats.size() + 0.5);
  if (c.flag == "slow") {
    return absl::StrFormat("%d->%d %.3g GB/s < %.0f%% of the %s median %.3g GB/s in %d/%zu repeats",
                           c.from, c.to, c.bandwidth_GBps, threshold * 100, c.klass,
                           c.class_bandwidth_GBps, outliers, c.repeats.size());
  }
  return absl::StrFormat("%d->%d latency %.1f us, %s median %.1f us, in %d/%zu repeats", c.from,
                         c.to, c.latency_us, c.klass, c.class_latency_us, outliers,
                         c.repeats.size());
}

}  // namespace

int ProbeReport::flagged_cells() const {
  int n = 0;
  for (const Cell& c : result.cells) n += !c.flag.empty();
  return n;
}

std::string probe_table(const ProbeReport& report) {
  const ProbeResult& r = report.result;
  std::string out = absl::StrFormat(
      "# weft diag probe: %d ranks, %s transfers (fastest of %d), %d pings, %d repeats; "
      "flagged: below %.0f%% of its class's median bandwidth, or latency above %.0fx, in most "
      "repeats\n",
      r.ranks, human_bytes(report.options.message_bytes), report.options.transfers,
      report.options.pings,
      report.options.repeats, report.outliers.threshold * 100, 1 / report.outliers.threshold);
  for (int path = 0; path < static_cast<int>(r.paths.size()); ++path) {
    matrix(out, r, path, "bandwidth GB/s", [](const Cell& c) {
      return absl::StrFormat("%.3g%s", c.bandwidth_GBps, mark(c, "slow"));
    });
    matrix(out, r, path, "latency us", [](const Cell& c) {
      return absl::StrFormat("%.1f%s", c.latency_us, mark(c, "high latency"));
    });
  }
  for (const std::string& k : report.unjudged_classes) {
    absl::StrAppend(&out, "# not judged: fewer than ", report.outliers.min_class_cells,
                    " measurements over ", k, " to compare\n");
  }
  const auto links = flagged_links(r);
  for (const auto& [key, cells] : links) {
    const auto& [a, b, path] = key;
    std::vector<std::string> why;
    for (const Cell* c : cells) why.push_back(cell_reason(*c, report.outliers.threshold));
    absl::StrAppend(&out, "# ", cells.front()->flag, ": ", path == 0 ? "link" : r.paths[path],
                    " ", rank_name(r, a), " - ", rank_name(r, b), ": ", absl::StrJoin(why, "; "),
                    "\n");
  }
  absl::StrAppend(&out, links.empty() ? "# verdict: healthy, nothing flagged\n"
                                      : absl::StrCat("# verdict: degraded, ", links.size(),
                                                     " link(s) or rail(s) flagged\n"));
  return out;
}

nlohmann::json probe_json(const ProbeReport& report) {
  const ProbeResult& r = report.result;
  nlohmann::json j;
  j["schema"] = "weft.diag.probe/1";
  j["ranks"] = r.ranks;
  j["hosts"] = r.hosts;
  j["message_bytes"] = report.options.message_bytes;
  j["pings"] = report.options.pings;
  j["transfers"] = report.options.transfers;
  j["repeats"] = report.options.repeats;
  j["threshold"] = report.outliers.threshold;
  j["paths"] = r.paths;
  j["cells"] = nlohmann::json::array();
  for (const Cell& c : r.cells) {
    nlohmann::json cell = {{"from", c.from},
                           {"to", c.to},
                           {"path", r.paths[c.path]},
                           {"class", c.klass},
                           {"latency_us", c.latency_us},
                           {"bandwidth_GBps", c.bandwidth_GBps},
                           {"class_latency_us", c.class_latency_us},
                           {"class_median_GBps", c.class_bandwidth_GBps},
                           {"flag", c.flag.empty() ? nlohmann::json() : nlohmann::json(c.flag)},
                           {"confidence", c.confidence}};
    nlohmann::json samples = nlohmann::json::array();
    for (const Sample& s : c.repeats) {
      samples.push_back({{"latency_us", s.latency_us}, {"bandwidth_GBps", s.bandwidth_GBps}});
    }
    cell["repeats"] = std::move(samples);
    j["cells"].push_back(std::move(cell));
  }
  j["flagged"] = nlohmann::json::array();
  for (const auto& [key, cells] : flagged_links(r)) {
    const auto& [a, b, path] = key;
    nlohmann::json why = nlohmann::json::array();
    for (const Cell* c : cells) why.push_back(cell_reason(*c, report.outliers.threshold));
    j["flagged"].push_back({{"ranks", {a, b}},
                            {"hosts", {r.hosts[a], r.hosts[b]}},
                            {"path", r.paths[path]},
                            {"flag", cells.front()->flag},
                            {"reasons", std::move(why)}});
  }
  j["unjudged_classes"] = report.unjudged_classes;
  j["verdict"] = j["flagged"].empty() ? "healthy" : "degraded";
  return j;
}

}  // namespace weft::tools::diag
