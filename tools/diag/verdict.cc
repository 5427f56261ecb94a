#include "tools/diag/verdict.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace weft::tools::diag {
namespace {

constexpr const char* kStates[] = {"HEALTHY", "SUSPECT", "FAILING", "ISOLATED", "PROBATION"};

int severity(const std::string& state) {
  // ISOLATED and PROBATION (a running job's) count as FAILING and SUSPECT here.
  if (state == "ISOLATED") return 2;
  if (state == "PROBATION") return 1;
  for (int i = 0; i < 3; ++i) {
    if (state == kStates[i]) return i;
  }
  return 0;
}

std::string host_of(const std::vector<std::string>& hosts, int rank) {
  return rank >= 0 && rank < static_cast<int>(hosts.size()) ? hosts[rank] : "?";
}

std::string link_name(const std::vector<std::string>& hosts, int a, int b) {
  return absl::StrCat("link ", a, "-", b, " (", host_of(hosts, a), "-", host_of(hosts, b), ")");
}

// The job-wide key and name of one rank's scope.
std::pair<std::tuple<std::string, int, int, int, std::string>, Verdict> place(
    const nlohmann::json& s, int rank, const std::vector<std::string>& hosts) {
  Verdict v;
  v.kind = s.value("kind", "");
  const int peer = s.value("peer", -1);
  const std::string name = s.value("name", "");
  if ((v.kind == "link" || v.kind == "rail") && peer >= 0) {
    const int a = std::min(rank, peer), b = std::max(rank, peer);
    v.ranks = {a, b};
    if (v.kind == "link") {
      v.scope = link_name(hosts, a, b);
      return {{v.kind, a, b, -1, ""}, v};
    }
    v.rail = s.value("rail", -1);
    const std::string device = s.value("device", "");
    v.scope = absl::StrCat("rail ", v.rail, device.empty() ? "" : absl::StrCat(" (", device, ")"),
                           " of ", link_name(hosts, a, b));
    return {{v.kind, a, b, v.rail, ""}, v};
  }
  v.ranks = {rank};
  v.rail = s.value("rail", -1);
  v.scope = absl::StrCat(name, " of rank ", rank, " (", host_of(hosts, rank), ")");
  return {{v.kind, rank, -1, -1, name}, v};
}

void worsen(Verdict& v, const std::string& state) {
  if (severity(state) > severity(v.state)) v.state = kStates[severity(state)];
}

// The scope's whole-run ratio for `rule` (kRatio), as evidence when it passes a threshold.
std::optional<nlohmann::json> whole_run_ratio(const nlohmann::json& scope, const health::Rule& rule,
                                              size_t rank) {
  double value = -1, per = -1, spurious = 0;
  const std::string spurious_name = rule.counter + "_spurious";
  for (const nlohmann::json& c : scope.value("counters", nlohmann::json::array())) {
    if (c.value("name", "") == rule.counter) value = c.value("value", 0.0);
    if (c.value("name", "") == rule.per) per = c.value("value", 0.0);
    if (c.value("name", "") == spurious_name) spurious = c.value("value", 0.0);
  }
  if (value < 0 || per < rule.min_per || per <= 0) return std::nullopt;
  // Retransmissions the peer already had (D-SACK) are reordering, not loss: over a whole
  // run both counts are final, so they can be taken off (a window's could not: the
  // duplicate report comes after the retransmission).
  value = std::max(0.0, value - spurious);
  const double ratio = value / per;
  const bool failing = ratio >= rule.failing;
  if (!failing && ratio < rule.suspect) return std::nullopt;
  const double threshold = failing ? rule.failing : rule.suspect;
  return nlohmann::json{
      {"source", "counter"}, {"rank", rank}, {"state", failing ? "FAILING" : "SUSPECT"},
      {"counter", rule.counter}, {"measure", "ratio"}, {"measured", ratio},
      {"threshold", threshold}, {"value", value}, {"per", rule.per}, {"per_value", per},
      {"spurious", spurious},
      {"reason", absl::StrFormat("%s %.0f of %.0f %s (%.3g%%) over the run >= %.3g%%%s",
                                 rule.counter, value, per, rule.per, ratio * 100,
                                 threshold * 100,
                                 spurious > 0 ? absl::StrFormat(" (%.0f spurious not counted)",
                                                                spurious)
                                              : "")}};
}

}  // namespace

std::vector<Verdict> judge_job(const std::vector<nlohmann::json>& ranks_seen,
                               const ProbeReport* probe, const health::Policy& policy) {
  std::vector<const health::Rule*> ratios;
  for (const health::Rule& r : policy.rules) {
    if (r.measure == health::Measure::kRatio) ratios.push_back(&r);
  }
  auto judged_whole = [&ratios](const std::string& counter) {
    return std::any_of(ratios.begin(), ratios.end(),
                       [&](const health::Rule* r) { return r->counter == counter; });
  };
  std::vector<std::string> hosts;
  if (probe != nullptr) hosts = probe->result.hosts;
  std::map<std::tuple<std::string, int, int, int, std::string>, Verdict> all;
  for (size_t r = 0; r < ranks_seen.size(); ++r) {
    for (const nlohmann::json& s : ranks_seen[r].value("scopes", nlohmann::json::array())) {
      auto [key, fresh] = place(s, static_cast<int>(r), hosts);
      Verdict& v = all.emplace(key, fresh).first->second;
      for (const nlohmann::json& why : s.value("why", nlohmann::json::array())) {
        if (judged_whole(why.value("counter", ""))) continue;
        worsen(v, why.value("state", "HEALTHY"));
        nlohmann::json e = {{"source", "counter"}, {"rank", r}};
        e.update(why);
        v.evidence.push_back(std::move(e));
      }
      for (const health::Rule* rule : ratios) {
        if (auto e = whole_run_ratio(s, *rule, r)) {
          worsen(v, (*e)["state"]);
          v.evidence.push_back(*std::move(e));
        }
      }
    }
  }
  if (probe != nullptr) {
    for (const Cell& c : probe->result.cells) {
      const int a = std::min(c.from, c.to), b = std::max(c.from, c.to);
      const int rail = c.path - 1;
      Verdict fresh;
      fresh.kind = rail < 0 ? "link" : "rail";
      fresh.ranks = {a, b};
      fresh.rail = rail;
      fresh.scope = rail < 0 ? link_name(hosts, a, b)
                             : absl::StrCat(probe->result.paths[c.path], " of ", link_name(hosts, a, b));
      Verdict& v = all.emplace(std::make_tuple(fresh.kind, a, b, rail, std::string()), fresh)
                       .first->second;
      if (c.flag.empty()) continue;
      worsen(v, "SUSPECT");
      const bool slow = c.flag == "slow";
      v.evidence.push_back(
          {{"source", "probe"},
           {"state", "SUSPECT"},
           {"from", c.from},
           {"to", c.to},
           {"measure", slow ? "bandwidth_GBps" : "latency_us"},
           {"measured", slow ? c.bandwidth_GBps : c.latency_us},
           {"threshold", slow ? probe->outliers.threshold * c.class_bandwidth_GBps
                              : c.class_latency_us / probe->outliers.threshold},
           {"confidence", c.confidence},
           {"reason", slow ? absl::StrFormat("probe %d->%d: %.3g GB/s < %.0f%% of the %s median "
                                             "%.3g GB/s in %.0f%% of repeats",
                                             c.from, c.to, c.bandwidth_GBps,
                                             probe->outliers.threshold * 100, c.klass,
                                             c.class_bandwidth_GBps, c.confidence * 100)
                           : absl::StrFormat("probe %d->%d: latency %.1f us, the %s median %.1f "
                                             "us, in %.0f%% of repeats",
                                             c.from, c.to, c.latency_us, c.klass,
                                             c.class_latency_us, c.confidence * 100)}});
    }
  }
  std::vector<Verdict> out;
  for (auto& [key, v] : all) out.push_back(std::move(v));
  // The worst first, then by kind and ranks (the map's order).
  std::stable_sort(out.begin(), out.end(), [](const Verdict& x, const Verdict& y) {
    return severity(x.state) > severity(y.state);
  });
  return out;
}

bool degraded(const std::vector<Verdict>& verdicts) {
  return std::any_of(verdicts.begin(), verdicts.end(),
                     [](const Verdict& v) { return severity(v.state) > 0; });
}

std::string health_table(const std::vector<Verdict>& verdicts, const ProbeReport* probe) {
  std::map<std::string, int> watched;
  std::map<std::string, int> by_state;
  for (const Verdict& v : verdicts) {
    ++watched[v.kind];
    ++by_state[v.state];
  }
  std::vector<std::string> kinds;
  for (const auto& [kind, n] : watched) kinds.push_back(absl::StrCat(kind, " x", n));
  std::string out = absl::StrCat("# weft diag health: watched ", absl::StrJoin(kinds, ", "),
                                 probe != nullptr ? "; every pair probed" : "", "\n");
  absl::StrAppendFormat(&out, "%-9s %-44s %s\n", "state", "scope", "evidence");
  for (const Verdict& v : verdicts) {
    if (severity(v.state) == 0) continue;
    std::vector<std::string> why;
    for (const nlohmann::json& e : v.evidence) {
      why.push_back(e["source"] == "probe"
                        ? e.value("reason", "")
                        : absl::StrCat("rank ", e.value("rank", -1), ": ", e.value("reason", "")));
    }
    absl::StrAppendFormat(&out, "%-9s %-44s %s\n", v.state, v.scope, absl::StrJoin(why, "; "));
  }
  if (!degraded(verdicts)) {
    absl::StrAppend(&out, "# verdict: healthy, every scope HEALTHY\n");
  } else {
    std::vector<std::string> counts;
    for (const char* s : {"FAILING", "SUSPECT"}) {
      if (by_state[s] > 0) counts.push_back(absl::StrCat(by_state[s], " ", s));
    }
    absl::StrAppend(&out, "# verdict: degraded, ", absl::StrJoin(counts, ", "), "\n");
  }
  return out;
}

nlohmann::json health_json(const std::vector<Verdict>& verdicts, const ProbeReport* probe,
                           const std::vector<nlohmann::json>& ranks_seen) {
  nlohmann::json j;
  j["schema"] = "weft.diag.health/1";
  j["verdicts"] = nlohmann::json::array();
  for (const Verdict& v : verdicts) {
    nlohmann::json x = {{"scope", v.scope}, {"kind", v.kind}, {"ranks", v.ranks},
                        {"state", v.state}, {"evidence", v.evidence}};
    if (v.rail >= 0) x["rail"] = v.rail;
    j["verdicts"].push_back(std::move(x));
  }
  if (probe != nullptr) j["probe"] = probe_json(*probe);
  j["ranks"] = ranks_seen;
  j["verdict"] = degraded(verdicts) ? "degraded" : "healthy";
  return j;
}

}  // namespace weft::tools::diag
