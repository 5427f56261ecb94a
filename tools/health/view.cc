#include "tools/health/view.hpp"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace weft::tools::health {
namespace {

// "2026-12-02T01:02:03.456Z" -> "01:02:03.456".
std::string clock_of(const nlohmann::json& t) {
  const std::string s = t.is_string() ? t.get<std::string>() : "";
  return s.size() >= 23 ? s.substr(11, 12) : s;
}

double counter(const nlohmann::json& scope, const char* name, const char* what) {
  const nlohmann::json& c = scope["counters"];
  if (!c.contains(name) || !c[name].contains(what) || !c[name][what].is_number()) return 0;
  return c[name][what].get<double>();
}

std::string human_bytes(double b) {
  for (const auto& [unit, scale] : {std::pair{"G", 1e9}, {"M", 1e6}, {"K", 1e3}}) {
    if (b >= scale) return absl::StrFormat("%.3g %sB", b / scale, unit);
  }
  return absl::StrFormat("%.0f B", b);
}

// What an endpoint answered must look like weft's (src/health/json.cc) before anything is
// read from it: a foreign server on the port, or another version, is "not a weft endpoint",
// never a healthy rank nor a crash. Empty when it does.
std::string health_shape_error(const nlohmann::json& h) {
  if (!h.is_object() || !h.contains("rank") || !h["rank"].is_number_integer() ||
      !h.contains("scopes") || !h["scopes"].is_array()) {
    return "an object with an integer rank and an array of scopes";
  }
  for (const nlohmann::json& s : h["scopes"]) {
    if (!s.is_object()) return "scopes that are objects";
    for (const char* key : {"scope", "kind", "state", "since"}) {
      if (s.contains(key) && !s[key].is_string()) return absl::StrCat("a string ", key);
    }
    if (s.contains("peer") && !s["peer"].is_number_integer()) return "an integer peer";
    if (s.contains("reason") && !s["reason"].is_object()) return "a reason that is an object";
    if (s.contains("counters") && !s["counters"].is_object()) return "counters in an object";
  }
  return "";
}

bool is_int_array(const nlohmann::json& a, size_t size = 0) {
  if (!a.is_array() || (size != 0 && a.size() != size)) return false;
  return std::all_of(a.begin(), a.end(), [](const nlohmann::json& x) { return x.is_number_integer(); });
}

bool route_has_shape(const nlohmann::json& r) {
  if (!r.is_object() || !r.contains("epoch") || !r["epoch"].is_number_unsigned() ||
      !r.contains("ring") || !is_int_array(r["ring"]) || !r.contains("isolated_links") ||
      !r["isolated_links"].is_array() || !r.contains("changes") || !r["changes"].is_array()) {
    return false;
  }
  for (const nlohmann::json& l : r["isolated_links"]) {
    if (!is_int_array(l, 2)) return false;
  }
  for (const nlohmann::json& c : r["changes"]) {
    if (!c.is_object() || !c.contains("change") || !c["change"].is_string()) return false;
  }
  return true;
}

}  // namespace

nlohmann::json job_json(const std::vector<RankView>& ranks, const std::string& time) {
  nlohmann::json j = {{"schema", "weft.health/1"}, {"time", time}};
  nlohmann::json out = nlohmann::json::array(), unhealthy = nlohmann::json::array();
  std::set<std::vector<int>> isolated;
  uint64_t epoch = 0;
  nlohmann::json ring, changes = nlohmann::json::array();
  int answered = 0;
  for (const RankView& given : ranks) {
    RankView r = given;
    if (!r.health.is_null()) {
      if (const std::string want = health_shape_error(r.health); !want.empty()) {
        r.error = absl::StrCat(r.endpoint, ": /health does not look like weft's (it needs ", want,
                               "): is this a weft endpoint of this version?");
        r.health = nullptr;
        r.route = nullptr;
      }
    }
    if (!r.route.is_null() && !route_has_shape(r.route)) {
      r.route = nullptr;
      if (r.error.empty()) r.error = absl::StrCat(r.endpoint, ": /route does not look like weft's");
    }
    nlohmann::json x = {{"endpoint", r.endpoint}};
    if (!r.error.empty()) x["error"] = r.error;
    if (!r.health.is_null()) {
      ++answered;
      x["rank"] = r.health.value("rank", -1);
      x["scopes"] = r.health.value("scopes", nlohmann::json::array());
      for (const nlohmann::json& s : x["scopes"]) {
        if (s.value("state", "HEALTHY") == "HEALTHY") continue;
        nlohmann::json u = {{"rank", x["rank"]}, {"scope", s.value("scope", "")},
                            {"kind", s.value("kind", "")}, {"state", s["state"]},
                            {"since", s.value("since", "")}};
        if (s.contains("reason")) u["reason"] = s["reason"].value("text", "");
        unhealthy.push_back(std::move(u));
      }
    }
    if (!r.route.is_null()) {
      x["route"] = r.route;
      // Every rank adopts each change at the same call; the most advanced rank speaks for
      // the job (one still in a call may be an epoch behind).
      const uint64_t e = r.route.value("epoch", uint64_t{0});
      if (ring.is_null() || e > epoch) {
        epoch = e;
        ring = r.route["ring"];
        changes = r.route["changes"];
      }
      for (const auto& l : r.route["isolated_links"]) isolated.insert(l.get<std::vector<int>>());
    }
    out.push_back(std::move(x));
  }
  std::sort(out.begin(), out.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a.value("rank", 1 << 30) < b.value("rank", 1 << 30);
  });
  j["answered"] = answered;
  j["endpoints"] = ranks.size();
  j["epoch"] = epoch;
  j["ring"] = ring.is_null() ? nlohmann::json::array() : ring;
  j["isolated_links"] = isolated;
  j["route_changes"] = changes;
  j["not_healthy"] = std::move(unhealthy);
  j["ranks"] = std::move(out);
  return j;
}

int job_status(const nlohmann::json& job) {
  if (job["answered"] != job["endpoints"]) return 2;
  return job["not_healthy"].empty() ? 0 : 1;
}

std::string job_table(const nlohmann::json& job) {
  std::vector<std::string> links;
  for (const auto& l : job["isolated_links"]) links.push_back(absl::StrCat(l[0].get<int>(), "-", l[1].get<int>()));
  std::vector<std::string> ring;
  for (const auto& r : job["ring"]) ring.push_back(absl::StrCat(r.get<int>()));
  std::string out = absl::StrFormat(
      "# weft health %s: %d of %d ranks answered; route epoch %d, ring %s; %s\n",
      clock_of(job["time"]), job["answered"].get<int>(), job["endpoints"].get<int>(),
      job["epoch"].get<int>(), absl::StrJoin(ring, " "),
      links.empty() ? "no link isolated" : absl::StrCat("isolated: ", absl::StrJoin(links, ", ")));
  for (const auto& r : job["ranks"]) {
    if (r.contains("error")) absl::StrAppend(&out, "# ", r["error"].get<std::string>(), "\n");
  }
  if (job["answered"] != job["endpoints"]) {
    out += "# a rank that does not answer: is the job running with WEFT_HEALTH_ENDPOINT at this "
           "port, with this many ranks per host (--per-host)?\n";
  }
  // Only what answered can be called healthy.
  const int answered = job["answered"].get<int>();
  if (job["not_healthy"].empty()) {
    if (job["answered"] == job["endpoints"]) {
      out += "# every scope HEALTHY\n";
    } else if (answered > 0) {
      absl::StrAppend(&out, "# every scope of the ", answered, " ranks that answered HEALTHY\n");
    }
  } else {
    absl::StrAppendFormat(&out, "%-5s %-34s %-10s %-13s %s\n", "rank", "scope", "state", "since", "reason");
    for (const auto& u : job["not_healthy"]) {
      absl::StrAppendFormat(&out, "%-5d %-34s %-10s %-13s %s\n", u["rank"].get<int>(),
                            u["scope"].get<std::string>(), u["state"].get<std::string>(),
                            clock_of(u["since"]), u.value("reason", ""));
    }
  }
  if (!job["route_changes"].empty()) {
    out += "# route changes\n";
    for (const auto& c : job["route_changes"]) {
      absl::StrAppendFormat(&out, "%-13s %s\n", clock_of(c["time"]), c["change"].get<std::string>());
    }
  }
  out += "# links: rank, peer, state, bytes sent (rate), tcp retransmits/s (spurious ones, "
         "which the peer already had, not counted)\n";
  for (const auto& r : job["ranks"]) {
    if (!r.contains("scopes")) continue;
    for (const auto& s : r["scopes"]) {
      if (s.value("kind", "") != "link") continue;
      absl::StrAppendFormat(&out, "%-5d %-5d %-10s %10s (%s/s) %8.3g\n", r["rank"].get<int>(),
                            s.value("peer", -1), s.value("state", ""),
                            human_bytes(counter(s, "link_bytes_sent", "value")),
                            human_bytes(counter(s, "link_bytes_sent", "rate")),
                            std::max(0.0, counter(s, "tcp_retransmits", "rate") -
                                              counter(s, "tcp_retransmits_spurious", "rate")));
    }
  }
  return out;
}

}  // namespace weft::tools::health
