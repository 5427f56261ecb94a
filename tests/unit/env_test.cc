// The settings table: unknown WEFT_* names are reported with the closest known name, and
// names that weft's own scripts, tests and virtual cluster read are not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "src/base/env.hpp"

namespace weft {
namespace {

using ::testing::HasSubstr;
using ::testing::AllOf;

TEST(UnknownEnv, AMisspelledSettingSuggestsTheKnownOne) {
  const auto w = unknown_env_warnings({"WEFT_TIMOUT", "WEFT_SHM_RING_BYTE", "WEFT_ALGORITM"});
  ASSERT_EQ(w.size(), 3u);
  EXPECT_THAT(w[0], HasSubstr("WEFT_TIMOUT is not a weft setting and is ignored (did you mean "
                              "WEFT_TIMEOUT?)"));
  EXPECT_THAT(w[1], HasSubstr("(did you mean WEFT_SHM_RING_BYTES?)"));
  EXPECT_THAT(w[2], HasSubstr("(did you mean WEFT_ALGORITHM?)"));
}

TEST(UnknownEnv, ANameFarFromEveryKnownOneSuggestsNone) {
  const auto w = unknown_env_warnings({"WEFT_BANANA_SPLIT"});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_THAT(w[0], HasSubstr("WEFT_BANANA_SPLIT is not a weft setting"));
  EXPECT_THAT(w[0], ::testing::Not(HasSubstr("did you mean")));
  EXPECT_THAT(w[0], HasSubstr("weft info"));
}

TEST(UnknownEnv, KnownSettingsToolingAndOtherPrefixesAreQuiet) {
  std::vector<std::string> names;
  for (const EnvVar* v : all_env_vars()) names.emplace_back(v->name);
  names.insert(names.end(), {"WEFT_BUILD_DIR", "WEFT_SANITIZERS", "WEFT_FAULT_CHILD",
                             "WEFT_VCLUSTER_RAILS", "WEFT_VCLUSTER", "WEFT_PYTORCH", "PATH",
                             "OMPI_COMM_WORLD_SIZE", "WEFT"});
  const auto warnings = unknown_env_warnings(names);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

TEST(ByteSettings, EveryOneHasARangeThatHoldsItsDefault) {
  for (const EnvVar* v : {&env::kSmallMessageBytes, &env::kShmRingBytes, &env::kRelayBytes}) {
    EXPECT_GT(v->max_bytes, 0u) << v->name;
    const uint64_t def = std::stoull(v->default_value);
    EXPECT_LE(v->min_bytes, def) << v->name;
    EXPECT_GE(v->max_bytes, def) << v->name;
    EXPECT_STRNE(v->cost, "") << v->name;
  }
}

TEST(ByteSettings, OutOfRangeIsRefusedAndNamesTheRangeAndTheCost) {
  const auto lookup = [](std::string_view name) -> std::optional<std::string> {
    if (name == "WEFT_RELAY_BYTES") return "999999999999999";
    return std::nullopt;
  };
  auto c = Config::from_env(lookup);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr("WEFT_RELAY_BYTES=999999999999999 (909.5 TiB)"),
                    HasSubstr("4 KiB..1 GiB"), HasSubstr("allocates and touches")));
}

// Byte settings take K, M and G as the command line does; what is not a number says so.
TEST(ByteSettings, SuffixesAreBytesAndWordsAreRefused) {
  auto with = [](std::string value) {
    return Config::from_env([value](std::string_view name) -> std::optional<std::string> {
      if (name == "WEFT_RELAY_BYTES") return value;
      return std::nullopt;
    });
  };
  for (const auto& [text, bytes] : {std::pair<std::string, size_t>{"64K", 64 << 10},
                                    {"512m", 512 << 20}, {"1G", size_t{1} << 30},
                                    {"8192", 8192}}) {
    auto c = with(text);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status();
    EXPECT_EQ(c->relay_bytes, bytes) << text;
  }
  auto big = with("2G");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("WEFT_RELAY_BYTES=2G (2 GiB) is outside"));
  for (const char* word : {"lots", "12Q", "K", "-4K"}) {
    auto c = with(word);
    ASSERT_FALSE(c.ok()) << word;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("is not a byte count")) << word;
  }
}

// A path kill inside a frame header takes any byte of the header and none past it.
TEST(FaultSettings, APathKillInAHeaderStaysInsideTheHeader) {
  auto with = [](std::string value) {
    return Config::from_env([value](std::string_view name) -> std::optional<std::string> {
      if (name == "WEFT_INJECT_PATH_KILL") return value;
      return std::nullopt;
    });
  };
  const int last = env::kFaultFrameHeaderBytes - 1;
  auto inside = with("0>1@4096+h" + std::to_string(last));
  ASSERT_TRUE(inside.ok()) << inside.status();
  ASSERT_TRUE(inside->inject_path_kill.has_value());
  EXPECT_EQ(inside->inject_path_kill->header_bytes, last);
  auto past = with("0>1@4096+h" + std::to_string(last + 1));
  ASSERT_FALSE(past.ok());
  EXPECT_THAT(std::string(past.status().message()),
              HasSubstr("(N < " + std::to_string(env::kFaultFrameHeaderBytes) + ")"));
}

// The health settings (src/health/): defaults, and a bad value named with what it takes.
TEST(HealthSettings, DefaultsAndRefusals) {
  auto defaults = Config::from_env([](std::string_view) { return std::nullopt; });
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_TRUE(defaults->health);
  EXPECT_EQ(defaults->health_interval, absl::Milliseconds(500));
  EXPECT_EQ(defaults->health_window, absl::Seconds(5));
  EXPECT_EQ(defaults->health_recover, absl::Seconds(10));
  EXPECT_EQ(defaults->health_endpoint_port, 0);
  EXPECT_EQ(defaults->nvml_library, "libnvidia-ml.so.1");
  EXPECT_EQ(defaults->ib_sysfs_root, "/sys");
  const std::pair<const char*, const char*> bad[] = {
      {"WEFT_HEALTH", "maybe"},           {"WEFT_HEALTH_INTERVAL_MS", "5"},
      {"WEFT_HEALTH_WINDOW", "0"},        {"WEFT_HEALTH_RECOVER", "soon"},
      {"WEFT_HEALTH_STALL_FRACTION", "2"}, {"WEFT_HEALTH_ENDPOINT", "80"},
  };
  for (const auto& entry : bad) {
    // Not a structured binding: clang 14 (the sanitizer builds) cannot capture one.
    const char* name = entry.first;
    const char* value = entry.second;
    auto c = Config::from_env([&](std::string_view n) -> std::optional<std::string> {
      if (n == name) return std::string(value);
      return std::nullopt;
    });
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(std::string(name) + "=" + value));
  }
  auto port = Config::from_env([](std::string_view n) -> std::optional<std::string> {
    if (n == "WEFT_HEALTH_ENDPOINT") return "9400";
    if (n == "WEFT_HEALTH") return "off";
    return std::nullopt;
  });
  ASSERT_TRUE(port.ok());
  EXPECT_EQ(port->health_endpoint_port, 9400);
  EXPECT_FALSE(port->health);
}

}  // namespace
}  // namespace weft
