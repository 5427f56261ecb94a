#include "src/base/env.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "src/base/byte_count.hpp"

namespace weft {

const std::vector<const EnvVar*>& all_env_vars() {
  static const std::vector<const EnvVar*> vars = {
      &env::kRank,      &env::kSize,         &env::kLocalRank,         &env::kCoordinator,
      &env::kSocketIfname, &env::kJobSecret, &env::kJobSecretFile, &env::kTransport, &env::kTimeout,           &env::kAlgorithm,
      &env::kSmallMessageBytes, &env::kShmRingBytes, &env::kShmSingleCopyBytes,
      &env::kRelayBytes, &env::kStagingBytes, &env::kDeviceStandIn, &env::kCudaIpc, &env::kHealth, &env::kHealthIntervalMs, &env::kHealthWindow,
      &env::kHealthRecover, &env::kHealthThresholds, &env::kHealthPolicy,
      &env::kHealthStallFraction, &env::kHealthLog, &env::kIsolate, &env::kRelayPaths, &env::kIsolateQuiet, &env::kHealthEndpoint, &env::kHealthEndpointAddress, &env::kNvmlLibrary,
      &env::kIbSysfsRoot, &env::kChecksum, &env::kSocketsPerRail, &env::kPathTimeoutMs, &env::kInjectPathKill,
      &env::kInjectCorrupt, &env::kInjectFile};
  return vars;
}

std::optional<std::string> read_env(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::string env_value(const EnvVar& var, const EnvLookup& lookup) {
  auto v = lookup(var.name);
  if (!v || v->empty()) return std::string(var.default_value);
  return *v;
}

namespace {

// "64 KiB", "90.9 TiB": sizes as a person reads them.
std::string human_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) v /= 1024, ++unit;
  return v == static_cast<double>(static_cast<uint64_t>(v))
             ? absl::StrCat(static_cast<uint64_t>(v), " ", kUnits[unit])
             : absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

// A byte setting within its declared range (K, M and G as on the command line). Refused
// before anything is allocated, with the memory the value would have taken.
absl::StatusOr<size_t> parse_bytes(const EnvVar& var, const EnvLookup& lookup) {
  const std::string s = env_value(var, lookup);
  const std::optional<uint64_t> count = parse_byte_count(s);
  if (!count) {
    return absl::InvalidArgumentError(absl::StrCat(
        var.name, "=", s, " is not a byte count (a number, with K, M or G if you like, such "
        "as 512K); unset it (default ", var.default_value, ") or give one within ",
        human_bytes(var.min_bytes), "..", human_bytes(var.max_bytes)));
  }
  const uint64_t v = *count;
  if (v < var.min_bytes || v > var.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        var.name, "=", s, " (", human_bytes(v), ")",
        " is outside ", human_bytes(var.min_bytes), "..", human_bytes(var.max_bytes), " (",
        var.min_bytes, "..", var.max_bytes, " bytes): ", var.cost,
        "; unset it (default ", var.default_value, ") or give a byte count in that range"));
  }
  return static_cast<size_t>(v);
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

bool read_by_tooling(std::string_view name) {
  for (std::string_view known : kToolingVariables) {
    if (!known.empty() && known.back() == '*') {
      if (name.substr(0, known.size() - 1) == known.substr(0, known.size() - 1)) return true;
    } else if (name == known) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> unknown_env_warnings(const std::vector<std::string>& names) {
  std::vector<std::string> warnings;
  for (const std::string& name : names) {
    if (name.rfind("WEFT_", 0) != 0 || read_by_tooling(name)) continue;
    const EnvVar* closest = nullptr;
    size_t best = 0;
    for (const EnvVar* v : all_env_vars()) {
      const size_t d = edit_distance(name, v->name);
      if (d == 0) {
        closest = nullptr, best = 0;
        break;
      }
      if (closest == nullptr || d < best) closest = v, best = d;
    }
    if (best == 0) continue;  // a known name
    // Beyond a third of the name, a suggestion is a guess: name none.
    const bool close = best * 3 <= name.size() - 5;
    warnings.push_back(absl::StrCat(
        name, " is not a weft setting and is ignored",
        close ? absl::StrCat(" (did you mean ", closest->name, "?)") : "",
        "; `weft info` lists every setting"));
  }
  return warnings;
}

void warn_about_unknown_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      names.emplace_back(entry.substr(0, entry.find('=')));
    }
    for (const std::string& w : unknown_env_warnings(names)) {
      std::fprintf(stderr, "weft: warning: %s\n", w.c_str());
    }
  });
}

namespace {

// A number (`unit` says what kind) within [lo, hi], or an error naming the variable and the range.
absl::StatusOr<double> parse_number(const EnvVar& var, const EnvLookup& lookup, double lo,
                                    double hi, const char* unit) {
  const std::string s = env_value(var, lookup);
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !(v >= lo && v <= hi)) {
    return absl::InvalidArgumentError(absl::StrCat(
        var.name, "=", s, " is not ", unit, " in ", lo, "..", hi, "; set one",
        *var.default_value ? absl::StrCat(" or unset it (default ", var.default_value, ")")
                           : std::string(" or unset it")));
  }
  return v;
}

// "on" or "off", or an error naming the variable.
absl::StatusOr<bool> parse_on_off(const EnvVar& var, const EnvLookup& lookup) {
  const std::string s = env_value(var, lookup);
  if (s != "on" && s != "off") {
    return absl::InvalidArgumentError(absl::StrCat(var.name, "=", s, " is not on or off"));
  }
  return s == "on";
}

absl::Status read_health_settings(const EnvLookup& lookup, Config& c) {
  auto health = parse_on_off(env::kHealth, lookup);
  if (!health.ok()) return health.status();
  c.health = *health;
  auto interval = parse_number(env::kHealthIntervalMs, lookup, 10, 60000, "a number of milliseconds");
  if (!interval.ok()) return interval.status();
  c.health_interval = absl::Milliseconds(*interval);
  auto window = parse_number(env::kHealthWindow, lookup, 0.01, 3600, "a number of seconds");
  if (!window.ok()) return window.status();
  c.health_window = absl::Seconds(*window);
  auto recover = parse_number(env::kHealthRecover, lookup, 0, 3600, "a number of seconds");
  if (!recover.ok()) return recover.status();
  c.health_recover = absl::Seconds(*recover);
  auto isolate = parse_on_off(env::kIsolate, lookup);
  if (!isolate.ok()) return isolate.status();
  c.isolate = *isolate;
  auto relay_paths = parse_on_off(env::kRelayPaths, lookup);
  if (!relay_paths.ok()) return relay_paths.status();
  c.relay_paths = *relay_paths;
  auto quiet = parse_number(env::kIsolateQuiet, lookup, 0, 86400, "a number of seconds");
  if (!quiet.ok()) return quiet.status();
  c.isolate_quiet = absl::Seconds(*quiet);
  auto stall = parse_number(env::kHealthStallFraction, lookup, 1e-6, 1, "a fraction");
  if (!stall.ok()) return stall.status();
  c.health_stall_fraction = *stall;
  c.health_thresholds = env_value(env::kHealthThresholds, lookup);
  c.health_policy_file = env_value(env::kHealthPolicy, lookup);
  c.health_log = env_value(env::kHealthLog, lookup);
  const std::string port = env_value(env::kHealthEndpoint, lookup);
  if (!port.empty()) {
    auto p = parse_number(env::kHealthEndpoint, lookup, 1024, 65000, "a TCP port");
    if (!p.ok()) return p.status();
    c.health_endpoint_port = static_cast<int>(*p);
  }
  c.health_endpoint_address = env_value(env::kHealthEndpointAddress, lookup);
  c.nvml_library = env_value(env::kNvmlLibrary, lookup);
  c.ib_sysfs_root = env_value(env::kIbSysfsRoot, lookup);
  return absl::OkStatus();
}

absl::Status read_link_settings(const EnvLookup& lookup, Config& c) {
  const std::string checksum = env_value(env::kChecksum, lookup);
  if (checksum != "0" && checksum != "1") {
    return absl::InvalidArgumentError(absl::StrCat("WEFT_CHECKSUM=", checksum, " is not 0 or 1"));
  }
  c.checksum = checksum == "1";
  auto per_rail = parse_number(env::kSocketsPerRail, lookup, 1, 4, "a count of sockets");
  if (!per_rail.ok()) return per_rail.status();
  c.sockets_per_rail = static_cast<int>(*per_rail);
  auto timeout = parse_number(env::kPathTimeoutMs, lookup, 100, 3600000, "a number of milliseconds");
  if (!timeout.ok()) return timeout.status();
  c.path_timeout_ms = static_cast<int>(
      std::min(*timeout, absl::ToDoubleMilliseconds(c.timeout) / 2));
  const std::string kill = env_value(env::kInjectPathKill, lookup);
  if (!kill.empty()) {
    Config::PathKill k;
    std::vector<std::string> parts = absl::StrSplit(kill, absl::ByAnyChar(">@+"));
    bool ok = (parts.size() == 3 || parts.size() == 4) && absl::SimpleAtoi(parts[0], &k.rank) &&
              absl::SimpleAtoi(parts[1], &k.peer) && absl::SimpleAtoi(parts[2], &k.at);
    if (ok && parts.size() == 4) {
      ok = parts[3].size() > 1 && parts[3][0] == 'h' &&
           absl::SimpleAtoi(parts[3].substr(1), &k.header_bytes) && k.header_bytes >= 0 &&
           k.header_bytes < env::kFaultFrameHeaderBytes;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WEFT_INJECT_PATH_KILL=", kill, " is not RANK>PEER@BYTE or RANK>PEER@BYTE+hN (N < ",
          env::kFaultFrameHeaderBytes, ")"));
    }
    c.inject_path_kill = k;
  }
  c.inject_file = env_value(env::kInjectFile, lookup);
  const std::string corrupt = env_value(env::kInjectCorrupt, lookup);
  if (!corrupt.empty()) {
    std::vector<std::string> parts = absl::StrSplit(corrupt, absl::MaxSplits('@', 1));
    bool ok = absl::SimpleAtod(parts[0], &c.inject_corrupt_rate) && c.inject_corrupt_rate > 0 &&
              c.inject_corrupt_rate <= 1;
    if (ok && parts.size() == 2) {
      for (const std::string& link : std::vector<std::string>(absl::StrSplit(parts[1], ','))) {
        std::vector<std::string> ends = absl::StrSplit(link, '-');
        std::pair<int, int> p;
        ok = ok && ends.size() == 2 && absl::SimpleAtoi(ends[0], &p.first) &&
             absl::SimpleAtoi(ends[1], &p.second);
        c.inject_corrupt_links.push_back(p);
      }
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WEFT_INJECT_CORRUPT=", corrupt,
          " is not RATE or RATE@RANK-PEER,... with 0 < RATE <= 1, e.g. 1e-6@0-1,1-0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Config> Config::from_env(const EnvLookup& lookup) {
  Config c;
  c.transport = env_value(env::kTransport, lookup);
  if (c.transport != "auto" && c.transport != "shm" && c.transport != "tcp" &&
      c.transport != "ucx") {
    return absl::InvalidArgumentError(
        absl::StrCat("WEFT_TRANSPORT=", c.transport, " is not one of auto, shm, tcp, ucx"));
  }
  const std::string t = env_value(env::kTimeout, lookup);
  double seconds = 0;
  if (!absl::SimpleAtod(t, &seconds) || !(seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("WEFT_TIMEOUT=", t, " is not a positive number of seconds"));
  }
  c.timeout = absl::Seconds(seconds);
  c.algorithm = env_value(env::kAlgorithm, lookup);
  c.socket_ifname = env_value(env::kSocketIfname, lookup);
  auto small = parse_bytes(env::kSmallMessageBytes, lookup);
  if (!small.ok()) return small.status();
  c.small_message_bytes = *small;
  auto ring = parse_bytes(env::kShmRingBytes, lookup);
  if (!ring.ok()) return ring.status();
  c.shm_ring_bytes = *ring;
  if (env_value(env::kShmSingleCopyBytes, lookup) != "auto") {
    auto single_copy = parse_bytes(env::kShmSingleCopyBytes, lookup);
    if (!single_copy.ok()) return single_copy.status();
    c.shm_single_copy_bytes = *single_copy;
  }
  auto relay = parse_bytes(env::kRelayBytes, lookup);
  if (!relay.ok()) return relay.status();
  c.relay_bytes = *relay;
  auto staging = parse_bytes(env::kStagingBytes, lookup);
  if (!staging.ok()) return staging.status();
  c.staging_bytes = *staging;
  auto stand_in = parse_on_off(env::kDeviceStandIn, lookup);
  if (!stand_in.ok()) return stand_in.status();
  c.device_stand_in = *stand_in;
  auto cuda_ipc = parse_on_off(env::kCudaIpc, lookup);
  if (!cuda_ipc.ok()) return cuda_ipc.status();
  c.cuda_ipc = *cuda_ipc;
  if (absl::Status s = read_health_settings(lookup, c); !s.ok()) return s;
  if (absl::Status s = read_link_settings(lookup, c); !s.ok()) return s;
  return c;
}

}  // namespace weft
