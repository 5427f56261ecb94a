#include "src/health/policy.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace weft::health {

const char* state_name(State s) {
  switch (s) {
    case State::kHealthy: return "HEALTHY";
    case State::kSuspect: return "SUSPECT";
    case State::kFailing: return "FAILING";
    case State::kIsolated: return "ISOLATED";
    case State::kProbation: return "PROBATION";
  }
  return "UNKNOWN";
}

const char* measure_name(Measure m) {
  switch (m) {
    case Measure::kDelta: return "delta";
    case Measure::kRate: return "rate";
    case Measure::kValue: return "value";
    case Measure::kRatio: return "ratio";
  }
  return "unknown";
}

namespace {

// DCGM's hardware limits (dcgmlib/src/DcgmGpuHardwareLimits.h): DCGM_LIMIT_MAX_LWLINK_ERROR 1
// for NVLink replay and recovery errors; DCGM_LIMIT_MAX_LWLINK_CRC_ERROR 100 per second ("CRC
// errors only matter at rates of 100+ per second"); DCGM_LIMIT_MAX_SBE_RATE 10 for corrected
// (single-bit) ECC errors. DCGM's memory health watch fails a GPU on any volatile
// uncorrected (double-bit) error.
constexpr const char* kDcgm = "DCGM hardware limits";
// NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors): 48 double-bit ECC, 74 NVLink
// error, 79 GPU fallen off the bus, 95 uncontained ECC error: the GPU or link is lost until
// reset. 63/64 row remapping (pending / failed), 92 high single-bit ECC rate, 94 contained
// ECC error: the GPU works on, but is wearing.
constexpr const char* kXid = "NVIDIA XID catalog";
// infiniband-diags' ibqueryerrors: the default thresholds of its error_thresholds file
// (SymbolErrorCounter=10, LinkErrorRecoveryCounter=10, LinkDownedCounter=10,
// PortRcvErrors=10, LocalLinkIntegrityErrors=10, ExcessiveBufferOverrunErrors=10,
// PortXmitDiscards=100, PortRcvRemotePhysicalErrors=100), at which it reports a port. Taken
// here per window as FAILING, and any increase as SUSPECT.
constexpr const char* kIbq = "ibqueryerrors thresholds";
// No standard tool judges a socket. Retransmissions are taken as a share of the segments
// sent, since their count alone grows with the traffic: a busy healthy path retransmits a few
// now and then (on these virtual hosts, tens at a job's start, under 0.3% of its segments),
// while 1% lost already costs tcp much of its throughput and 3% most of it (Mathis et al.:
// throughput falls as 1/sqrt(loss)). Judged once the path sent 1000 segments in the window,
// a window of 1 s: loss cuts a path's throughput several times over, so the clean segments
// sent before it began dilute any window that holds them (on the virtual cluster, 5% loss
// showed at 2-3% over 5 s; over 2 s it took until 2-4.7 s after the fault to show at 3%, as
// the 10 times busier second before it left the window; over 1 s, a second sooner).
constexpr const char* kTcp = "weft: tcp retransmits";
constexpr const char* kWeft = "weft: transport observations";

Rule rule(const char* counter, Measure m, double suspect, double failing, const char* anchor) {
  return Rule{counter, m, suspect, failing, absl::ZeroDuration(), anchor, "", 0};
}

Rule ratio(const char* counter, const char* per, double min_per, double suspect,
           double failing, absl::Duration window, const char* anchor) {
  Rule r = rule(counter, Measure::kRatio, suspect, failing, anchor);
  r.window = window;
  r.per = per;
  r.min_per = min_per;
  return r;
}

}  // namespace

Policy Policy::defaults() {
  Policy p;
  const Measure d = Measure::kDelta, r = Measure::kRate, v = Measure::kValue;
  p.rules = {
      ratio("tcp_retransmits", "tcp_segments_sent", 1000, 0.01, 0.03, absl::Seconds(1), kTcp),
      rule("link_stalls", d, 1, 3, kWeft),
      rule("link_failed_connects", d, 1, kNever, kWeft),
      // A link that lost a path or caught corruption carries on (transport/tcp/pair.hpp), but
      // something under it is failing; a path that died stays dead.
      rule("link_path_failures", d, 1, kNever, kWeft),
      rule("link_checksum_errors", d, 1, 10, kWeft),
      rule("path_down", v, kNever, 1, kWeft),
      // Every rail's path dead: the link lives on a relay path through a third rank, which
      // copies every byte; the ring should go around it (src/isolation.hpp).
      rule("link_every_rail_down", v, kNever, 1, kWeft),
      rule("ecc_uncorrected", d, kNever, 1, kDcgm),
      rule("ecc_corrected", r, 10, kNever, kDcgm),
      rule("nvlink_replay", d, 1, kNever, kDcgm),
      rule("nvlink_recovery", d, 1, kNever, kDcgm),
      rule("nvlink_crc_flit", r, kNever, 100, kDcgm),
      rule("nvlink_crc_data", r, kNever, 100, kDcgm),
      rule("nvlink_down", v, kNever, 1, kDcgm),
      rule("xid_48", d, kNever, 1, kXid),
      rule("xid_74", d, kNever, 1, kXid),
      rule("xid_79", d, kNever, 1, kXid),
      rule("xid_95", d, kNever, 1, kXid),
      rule("xid_63", d, 1, kNever, kXid),
      rule("xid_64", d, 1, kNever, kXid),
      rule("xid_92", d, 1, kNever, kXid),
      rule("xid_94", d, 1, kNever, kXid),
      rule("ib_symbol_error", d, 1, 10, kIbq),
      rule("ib_link_error_recovery", d, 1, 10, kIbq),
      rule("ib_link_downed", d, 1, 10, kIbq),
      rule("ib_port_rcv_errors", d, 1, 10, kIbq),
      rule("ib_local_link_integrity_errors", d, 1, 10, kIbq),
      rule("ib_excessive_buffer_overrun_errors", d, 1, 10, kIbq),
      rule("ib_port_xmit_discards", d, 1, 100, kIbq),
      rule("ib_port_rcv_remote_physical_errors", d, 1, 100, kIbq),
      rule("ib_port_down", v, kNever, 1, "port state not ACTIVE"),
      rule("ib_degraded", v, 1, kNever, "width or speed below the port's best"),
  };
  return p;
}

const Rule* Policy::rule_for(std::string_view counter) const {
  for (const Rule& r : rules) {
    if (r.counter == counter) return &r;
  }
  return nullptr;
}

absl::Duration Policy::window_of(const Rule& rule) const {
  return rule.window > absl::ZeroDuration() ? rule.window : window;
}

absl::Duration Policy::longest_window() const {
  absl::Duration longest = window;
  for (const Rule& r : rules) longest = std::max(longest, window_of(r));
  return longest;
}

namespace {

Rule& rule_to_change(Policy& p, std::string_view counter) {
  for (Rule& r : p.rules) {
    if (r.counter == counter) return r;
  }
  p.rules.push_back(Rule{std::string(counter), Measure::kRate, kNever, kNever,
                         absl::ZeroDuration(), "set by the user", "", 0});
  return p.rules.back();
}

bool parse_threshold(absl::string_view text, double* out) {
  if (text == "-") {
    *out = kNever;
    return true;
  }
  return absl::SimpleAtod(text, out) && *out >= 0;
}

}  // namespace

absl::Status Policy::apply_overrides(std::string_view text_in) {
  // This Abseil's string_view is its own type, not std::string_view.
  const absl::string_view text(text_in.data(), text_in.size());
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::vector<absl::string_view> parts =
        kv.size() == 2 ? absl::StrSplit(kv[1], '/') : std::vector<absl::string_view>{};
    double suspect = 0, failing = 0, window_s = 0;
    if (kv.size() != 2 || kv[0].empty() || parts.size() < 2 || parts.size() > 3 ||
        !parse_threshold(parts[0], &suspect) || !parse_threshold(parts[1], &failing) ||
        (parts.size() == 3 && !(absl::SimpleAtod(parts[2], &window_s) && window_s > 0))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WEFT_HEALTH_THRESHOLDS: '", item,
          "' is not COUNTER=SUSPECT/FAILING[/WINDOW_S] (numbers >= 0, '-' for none), e.g. "
          "tcp_retransmits=0.02/0.05; `weft info` lists the counters and their rules"));
    }
    Rule& r = rule_to_change(*this, std::string_view(kv[0].data(), kv[0].size()));
    r.suspect = suspect;
    r.failing = failing;
    if (window_s > 0) r.window = absl::Seconds(window_s);
    r.anchor = "WEFT_HEALTH_THRESHOLDS";
  }
  return absl::OkStatus();
}

absl::Status Policy::apply_json(std::string_view json, std::string_view origin_in) {
  const std::string origin(origin_in);
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": ", what, "; expected {\"window_s\": 5, \"recover_s\": 10, \"rules\": "
        "{\"nvlink_replay\": {\"measure\": \"delta\", \"suspect\": null, \"failing\": 1}}} "
        "(docs/HEALTH.md)"));
  };
  const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return bad("not a JSON object");
  const auto seconds = [&](const nlohmann::json& j, const char* key,
                           absl::Duration* out) -> absl::Status {
    if (!j.contains(key)) return absl::OkStatus();
    if (!j[key].is_number() || !(j[key].get<double>() > 0)) {
      return bad(absl::StrCat("\"", key, "\" is not a positive number"));
    }
    *out = absl::Seconds(j[key].get<double>());
    return absl::OkStatus();
  };
  if (absl::Status s = seconds(doc, "window_s", &window); !s.ok()) return s;
  if (absl::Status s = seconds(doc, "recover_s", &recover); !s.ok()) return s;
  if (!doc.contains("rules")) return absl::OkStatus();
  if (!doc["rules"].is_object()) return bad("\"rules\" is not an object");
  for (const auto& [counter, spec] : doc["rules"].items()) {
    if (!spec.is_object()) return bad(absl::StrCat("rule \"", counter, "\" is not an object"));
    Rule& r = rule_to_change(*this, counter);
    if (spec.contains("measure")) {
      const std::string m = spec["measure"].is_string() ? spec["measure"].get<std::string>() : "";
      if (m == "delta") r.measure = Measure::kDelta;
      else if (m == "rate") r.measure = Measure::kRate;
      else if (m == "value") r.measure = Measure::kValue;
      else if (m == "ratio") r.measure = Measure::kRatio;
      else return bad(absl::StrCat("rule \"", counter, "\": measure is not delta, rate, value or ratio"));
    }
    if (spec.contains("per")) {
      if (!spec["per"].is_string()) return bad(absl::StrCat("rule \"", counter, "\": per is not a counter name"));
      r.per = spec["per"].get<std::string>();
    }
    if (spec.contains("min_per")) {
      if (!spec["min_per"].is_number() || spec["min_per"].get<double>() < 0) {
        return bad(absl::StrCat("rule \"", counter, "\": min_per is not a number >= 0"));
      }
      r.min_per = spec["min_per"].get<double>();
    }
    if (r.measure == Measure::kRatio && r.per.empty()) {
      return bad(absl::StrCat("rule \"", counter, "\": a ratio needs \"per\", the counter it is a share of"));
    }
    for (auto [key, field] : {std::pair{"suspect", &r.suspect}, std::pair{"failing", &r.failing}}) {
      if (!spec.contains(key)) continue;
      if (spec[key].is_null()) *field = kNever;
      else if (spec[key].is_number() && spec[key].get<double>() >= 0) *field = spec[key].get<double>();
      else return bad(absl::StrCat("rule \"", counter, "\": ", key, " is not a number >= 0 or null"));
    }
    if (absl::Status s = seconds(spec, "window_s", &r.window); !s.ok()) return s;
    r.anchor = origin;
  }
  return absl::OkStatus();
}

absl::StatusOr<Policy> Policy::from_config(const Config& config) {
  Policy p = defaults();
  p.window = config.health_window;
  p.recover = config.health_recover;
  if (!config.health_policy_file.empty()) {
    std::ifstream in(config.health_policy_file);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WEFT_HEALTH_POLICY=", config.health_policy_file,
          ": cannot read it; give the path of a JSON policy file or unset it"));
    }
    std::stringstream text;
    text << in.rdbuf();
    const std::string origin = absl::StrCat("WEFT_HEALTH_POLICY=", config.health_policy_file);
    if (absl::Status s = p.apply_json(text.str(), origin); !s.ok()) return s;
  }
  if (absl::Status s = p.apply_overrides(config.health_thresholds); !s.ok()) return s;
  return p;
}

std::vector<std::string> Policy::describe() const {
  std::vector<std::string> lines;
  lines.push_back(absl::StrFormat("window %gs, recover %gs; SUSPECT/FAILING at or above:",
                                  absl::ToDoubleSeconds(window), absl::ToDoubleSeconds(recover)));
  for (const Rule& r : rules) {
    const char* per = r.measure == Measure::kRate ? "/s" : "";
    const auto threshold = [per](double t) {
      return t == kNever ? std::string("-") : absl::StrFormat("%g%s", t, per);
    };
    std::string over = r.measure == Measure::kValue
                           ? std::string("now")
                           : absl::StrFormat("over %gs", absl::ToDoubleSeconds(window_of(r)));
    if (r.measure == Measure::kRatio) {
      absl::StrAppendFormat(&over, ", of %s (at least %g)", r.per, r.min_per);
    }
    lines.push_back(absl::StrFormat("%-36s %-5s %8s %8s  %s  (%s)", r.counter,
                                    measure_name(r.measure), threshold(r.suspect),
                                    threshold(r.failing), over, r.anchor));
  }
  return lines;
}

}  // namespace weft::health
