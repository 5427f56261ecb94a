#include "src/env.hpp"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weft {

const std::vector<const EnvVar*>& all_env_vars() {
  static const std::vector<const EnvVar*> vars = {
      &env::kRank,      &env::kSize,         &env::kLocalRank,         &env::kCoordinator,
      &env::kSocketIfname, &env::kJobSecret, &env::kTransport, &env::kTimeout,           &env::kAlgorithm,
      &env::kSmallMessageBytes, &env::kShmRingBytes, &env::kShmSingleCopyBytes,
      &env::kRelayBytes};
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

absl::StatusOr<size_t> parse_bytes(const EnvVar& var, const EnvLookup& lookup, size_t min) {
  const std::string s = env_value(var, lookup);
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v < min) {
    return absl::InvalidArgumentError(absl::StrCat(var.name, "=", s, " is not a byte count >= ",
                                                   min, "; unset it or give a number"));
  }
  return static_cast<size_t>(v);
}

}  // namespace

absl::StatusOr<Config> Config::from_env(const EnvLookup& lookup) {
  Config c;
  c.transport = env_value(env::kTransport, lookup);
  if (c.transport != "auto" && c.transport != "shm" && c.transport != "tcp") {
    return absl::InvalidArgumentError(
        absl::StrCat("WEFT_TRANSPORT=", c.transport, " is not one of auto, shm, tcp"));
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
  auto small = parse_bytes(env::kSmallMessageBytes, lookup, 0);
  if (!small.ok()) return small.status();
  c.small_message_bytes = *small;
  auto ring = parse_bytes(env::kShmRingBytes, lookup, 4096);
  if (!ring.ok()) return ring.status();
  c.shm_ring_bytes = *ring;
  if (env_value(env::kShmSingleCopyBytes, lookup) != "auto") {
    auto single_copy = parse_bytes(env::kShmSingleCopyBytes, lookup, 0);
    if (!single_copy.ok()) return single_copy.status();
    c.shm_single_copy_bytes = *single_copy;
  }
  auto relay = parse_bytes(env::kRelayBytes, lookup, 4096);
  if (!relay.ok()) return relay.status();
  c.relay_bytes = *relay;
  return c;
}

}  // namespace weft
