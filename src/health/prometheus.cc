#include "src/health/prometheus.hpp"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft::health {
namespace {

// A label value with backslash, quote and newline escaped, as the format requires.
std::string escaped(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string labels(int rank, const Scope& s) {
  std::string l = absl::StrCat("rank=\"", rank, "\",kind=\"", scope_kind_name(s.kind),
                               "\",scope=\"", escaped(s.name()), "\"");
  if (s.peer >= 0) absl::StrAppend(&l, ",peer=\"", s.peer, "\"");
  if (s.rail >= 0) absl::StrAppend(&l, ",rail=\"", s.rail, "\"");
  if (s.gpu >= 0) absl::StrAppend(&l, ",gpu=\"", s.gpu, "\"");
  if (s.link >= 0) absl::StrAppend(&l, ",link=\"", s.link, "\"");
  if (!s.device.empty()) absl::StrAppend(&l, ",device=\"", escaped(s.device), "\"");
  return l;
}

std::string value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}

}  // namespace

std::string prometheus_text(int rank, const std::vector<ScopeHealth>& scopes) {
  std::string out =
      "# HELP weft_health_state State of a link, rail, GPU, NVLink or port: 0 HEALTHY, "
      "1 SUSPECT, 2 FAILING, 3 ISOLATED, 4 PROBATION.\n# TYPE weft_health_state gauge\n";
  // Each counter is one family, so its samples must come together: gather them first.
  struct Family {
    CounterKind kind;
    std::string samples;
  };
  std::map<std::string, Family> families;
  for (const ScopeHealth& s : scopes) {
    const std::string l = labels(rank, s.scope);
    absl::StrAppend(&out, "weft_health_state{", l, "} ", static_cast<int>(s.state), "\n");
    for (const Reading& r : s.counters) {
      const bool cumulative = r.kind == CounterKind::kCumulative;
      // The text format names a family as its samples are named: counters end in _total.
      const std::string family = absl::StrCat("weft_", r.name, cumulative ? "_total" : "");
      Family& f = families.try_emplace(family, Family{r.kind, ""}).first->second;
      absl::StrAppend(&f.samples, family, "{", l, "} ", value(r.value), "\n");
    }
  }
  for (const auto& [family, f] : families) {
    const bool cumulative = f.kind == CounterKind::kCumulative;
    absl::StrAppend(&out, "# HELP ", family, " weft health counter ", family.substr(5),
                    ".\n# TYPE ", family,
                    cumulative ? " counter\n" : " gauge\n", f.samples);
  }
  return out;
}

}  // namespace weft::health
