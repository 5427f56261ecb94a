// NvmlSource against the fake libnvidia-ml.so.1 (tests/fakes/fake_nvml.cc), loaded through
// the real dlopen path. Each test writes the fake's JSON state file, as a fault script would.
#include "src/health/nvml_source.hpp"

#include <stdlib.h>  // mkdtemp, setenv

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#ifndef WEFT_FAKE_NVML_PATH
#error "WEFT_FAKE_NVML_PATH: the full path of the fake libnvidia-ml.so.1"
#endif

namespace weft::health {
namespace {

namespace fs = std::filesystem;

// Two GPUs joined by two NVLinks; GPU 0's third link goes to a GPU of no rank. Bus ids are
// spelled as NVML spells them, upper case included.
constexpr const char* kTwoGpus = R"({"gpus": [
  {"bus_id": "00000000:18:00.0",
   "ecc": {"corrected": 5, "uncorrected": 1},
   "nvlinks": [
     {"active": true, "remote_bus_id": "00000000:3B:00.0",
      "crc_flit": 3, "crc_data": 4, "replay": 5, "recovery": 6},
     {"active": true, "remote_bus_id": "00000000:3B:00.0"},
     {"active": true, "remote_bus_id": "00000000:C0:00.0"}]},
  {"bus_id": "00000000:3B:00.0",
   "nvlinks": [
     {"active": true, "remote_bus_id": "00000000:18:00.0"},
     {"active": false, "remote_bus_id": "00000000:18:00.0"}]}
]})";

const std::vector<std::string> kBusIdByRank = {"0000:18:00.0", "00000000:3b:00.0"};

class NvmlSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir_template = (fs::temp_directory_path() / "weft-nvml-XXXXXX").string();
    ASSERT_NE(mkdtemp(dir_template.data()), nullptr);
    dir_ = dir_template;
    state_ = dir_ / "state.json";
    setenv("WEFT_FAKE_NVML_STATE", state_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("WEFT_FAKE_NVML_STATE");
    fs::remove_all(dir_);
  }

  // As scripts do: a whole new file renamed over the old, never a half-written one.
  void write_state(const std::string& json) {
    fs::path temporary = dir_ / "state.json.tmp";
    std::ofstream(temporary) << json;
    fs::rename(temporary, state_);
  }

  // A source over the fake, opened, for a rank on GPU `self_gpu` among kBusIdByRank's ranks.
  std::unique_ptr<NvmlSource> open_source(int self_gpu) {
    auto source = std::make_unique<NvmlSource>(WEFT_FAKE_NVML_PATH);
    absl::Status status = source->open();
    EXPECT_TRUE(status.ok()) << status;
    source->set_peers(self_gpu, kBusIdByRank);
    return source;
  }

  static std::vector<Sample> sample(NvmlSource& source) {
    std::vector<Sample> out;
    source.sample(absl::FromUnixSeconds(1000), out);
    return out;
  }

  fs::path dir_;
  fs::path state_;
};

const Sample* find(const std::vector<Sample>& samples, ScopeKind kind, int link = -1) {
  for (const Sample& s : samples) {
    if (s.scope.kind == kind && s.scope.link == link) return &s;
  }
  return nullptr;
}

std::optional<double> counter(const Sample* sample, const std::string& name) {
  if (sample == nullptr) return std::nullopt;
  for (const Counter& c : sample->counters) {
    if (c.name == name) return c.value;
  }
  return std::nullopt;
}

std::string nvlink_json(int links, bool active, int base) {
  std::string json;
  for (int l = 0; l < links; ++l) {
    absl::StrAppend(&json, l > 0 ? "," : "", R"({"active": )", active ? "true" : "false",
                    R"(, "remote_bus_id": "00000000:3b:00.0", "crc_flit": )", base + 10 * l,
                    R"(, "crc_data": )", base + 10 * l + 1, R"(, "replay": )", base + 10 * l + 2,
                    R"(, "recovery": )", base + 10 * l + 3, "}");
  }
  return json;
}

TEST(NormalizePciBusId, SpellsEveryBusIdOneWay) {
  EXPECT_EQ(normalize_pci_bus_id("00000000:18:00.0"), "0000:18:00.0");
  EXPECT_EQ(normalize_pci_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0000:3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("18:00.0"), "0000:18:00.0");
  EXPECT_EQ(normalize_pci_bus_id(" 00010000:C1:1F.7 "), "10000:c1:1f.7");
  EXPECT_EQ(normalize_pci_bus_id(""), "");
  EXPECT_EQ(normalize_pci_bus_id("Not-A-Bus"), "not-a-bus");
  EXPECT_EQ(normalize_pci_bus_id("0000:100:00.0"), "0000:100:00.0");  // bus past 0xff
}

TEST_F(NvmlSourceTest, TwoGpusJoinedByNvlinksNameTheirPeers) {
  write_state(kTwoGpus);
  std::unique_ptr<NvmlSource> rank0 = open_source(0);
  std::unique_ptr<NvmlSource> rank1 = open_source(1);  // NVML counts its initialisations
  EXPECT_TRUE(rank0->loaded());
  EXPECT_EQ(rank0->name(), "nvml");
  EXPECT_EQ(rank0->gpu_bus_ids(), (std::vector<std::string>{"0000:18:00.0", "0000:3b:00.0"}));

  std::vector<Sample> samples = sample(*rank0);
  ASSERT_EQ(samples.size(), 4u);  // the GPU and its three links
  const Sample* gpu = find(samples, ScopeKind::kGpu);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->scope.gpu, 0);
  EXPECT_EQ(gpu->scope.device, "0000:18:00.0");
  EXPECT_EQ(gpu->time, absl::FromUnixSeconds(1000));
  for (int link : {0, 1}) {
    const Sample* nvlink = find(samples, ScopeKind::kNvlink, link);
    ASSERT_NE(nvlink, nullptr) << link;
    EXPECT_EQ(nvlink->scope.gpu, 0);
    EXPECT_EQ(nvlink->scope.device, "0000:3b:00.0");
    EXPECT_EQ(nvlink->scope.peer, 1);
    EXPECT_EQ(nvlink->scope.name(), absl::StrCat("nvlink ", link, " of gpu 0 to rank 1"));
  }
  const Sample* to_nobody = find(samples, ScopeKind::kNvlink, 2);
  ASSERT_NE(to_nobody, nullptr);
  EXPECT_EQ(to_nobody->scope.device, "0000:c0:00.0");
  EXPECT_EQ(to_nobody->scope.peer, -1);

  samples = sample(*rank1);  // only rank 1's GPU: rank 0 reports its own
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(find(samples, ScopeKind::kGpu)->scope.device, "0000:3b:00.0");
  EXPECT_EQ(find(samples, ScopeKind::kNvlink, 0)->scope.peer, 0);
  EXPECT_EQ(find(samples, ScopeKind::kNvlink, 1)->scope.device, "0000:18:00.0");
}

TEST_F(NvmlSourceTest, NoGpuOfItsOwnReportsNothing) {
  write_state(kTwoGpus);
  std::unique_ptr<NvmlSource> source = open_source(-1);
  EXPECT_TRUE(sample(*source).empty());
}

TEST_F(NvmlSourceTest, ReadsVolatileEccCountsAsTheyGrow) {
  write_state(kTwoGpus);
  std::unique_ptr<NvmlSource> source = open_source(0);
  std::vector<Sample> samples = sample(*source);
  const Sample* gpu = find(samples, ScopeKind::kGpu);
  EXPECT_EQ(counter(gpu, "ecc_corrected"), 5);
  EXPECT_EQ(counter(gpu, "ecc_uncorrected"), 1);
  ASSERT_NE(gpu, nullptr);
  for (const Counter& c : gpu->counters) EXPECT_EQ(c.kind, CounterKind::kCumulative) << c.name;

  std::string grown = kTwoGpus;
  grown.replace(grown.find(R"("corrected": 5)"), 14, R"("corrected": 9)");
  write_state(grown);
  samples = sample(*source);
  EXPECT_EQ(counter(find(samples, ScopeKind::kGpu), "ecc_corrected"), 9);
}

TEST_F(NvmlSourceTest, ReadsNvlinkErrorCountersAndState) {
  write_state(kTwoGpus);
  std::unique_ptr<NvmlSource> source = open_source(0);
  std::vector<Sample> samples = sample(*source);
  const Sample* link0 = find(samples, ScopeKind::kNvlink, 0);
  EXPECT_EQ(counter(link0, "nvlink_crc_flit"), 3);
  EXPECT_EQ(counter(link0, "nvlink_crc_data"), 4);
  EXPECT_EQ(counter(link0, "nvlink_replay"), 5);
  EXPECT_EQ(counter(link0, "nvlink_recovery"), 6);
  EXPECT_EQ(counter(link0, "nvlink_down"), 0);
  EXPECT_EQ(counter(find(samples, ScopeKind::kNvlink, 1), "nvlink_replay"), 0);
  ASSERT_NE(link0, nullptr);
  for (const Counter& c : link0->counters) {
    EXPECT_EQ(c.kind, c.name == "nvlink_down" ? CounterKind::kGauge : CounterKind::kCumulative)
        << c.name;
  }
}

TEST_F(NvmlSourceTest, AnInactiveLinkIsDownAndKeepsItsPeer) {
  write_state(kTwoGpus);
  std::unique_ptr<NvmlSource> source = open_source(1);
  std::vector<Sample> samples = sample(*source);
  EXPECT_EQ(counter(find(samples, ScopeKind::kNvlink, 0), "nvlink_down"), 0);
  const Sample* down = find(samples, ScopeKind::kNvlink, 1);
  EXPECT_EQ(counter(down, "nvlink_down"), 1);
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->scope.peer, 0);
  EXPECT_EQ(down->scope.device, "0000:18:00.0");
}

// Newer GPUs refuse nvmlDeviceGetNvLinkErrorCounter; the counts come as field values, one
// field id per link for links 0-11 (two id ranges), replay and recovery only past that.
TEST_F(NvmlSourceTest, FallsBackToFieldValuesWhereErrorCountersAreNotSupported) {
  write_state(absl::StrCat(R"({"gpus": [{"bus_id": "00000000:18:00.0",
      "nvlink_error_counter_unsupported": true, "nvlinks": [)",
                           nvlink_json(14, true, 100), "]}]}"));
  std::unique_ptr<NvmlSource> source = open_source(0);
  for (int round = 0; round < 2; ++round) {  // the second goes straight to field values
    std::vector<Sample> samples = sample(*source);
    ASSERT_EQ(samples.size(), 15u);
    for (int link = 0; link < 14; ++link) {
      const Sample* s = find(samples, ScopeKind::kNvlink, link);
      SCOPED_TRACE(absl::StrCat("link ", link, " round ", round));
      if (link < 12) {
        EXPECT_EQ(counter(s, "nvlink_crc_flit"), 100 + 10 * link);
        EXPECT_EQ(counter(s, "nvlink_crc_data"), 101 + 10 * link);
      } else {  // no field id holds CRC counts past link 11
        EXPECT_EQ(counter(s, "nvlink_crc_flit"), std::nullopt);
        EXPECT_EQ(counter(s, "nvlink_crc_data"), std::nullopt);
      }
      EXPECT_EQ(counter(s, "nvlink_replay"), 102 + 10 * link);
      EXPECT_EQ(counter(s, "nvlink_recovery"), 103 + 10 * link);
      EXPECT_EQ(counter(s, "nvlink_down"), 0);
    }
  }
}

TEST_F(NvmlSourceTest, CountsEachXidOnce) {
  std::string state = R"({"gpus": [{"bus_id": "00000000:18:00.0", "xids": [79, 48, 79]},
                                    {"bus_id": "00000000:3b:00.0", "xids": [13]}]})";
  write_state(state);
  std::unique_ptr<NvmlSource> source = open_source(0);
  for (int round = 0; round < 2; ++round) {  // a second sample finds no new events
    std::vector<Sample> samples = sample(*source);
    const Sample* gpu = find(samples, ScopeKind::kGpu);
    EXPECT_EQ(counter(gpu, "xid_79"), 2) << round;
    EXPECT_EQ(counter(gpu, "xid_48"), 1) << round;
    EXPECT_EQ(counter(gpu, "xid_13"), std::nullopt) << "another rank's GPU";
  }
  state.replace(state.find("[79, 48, 79]"), 12, "[79, 48, 79, 48]");
  write_state(state);
  std::vector<Sample> samples = sample(*source);
  EXPECT_EQ(counter(find(samples, ScopeKind::kGpu), "xid_48"), 2);
  EXPECT_EQ(counter(find(samples, ScopeKind::kGpu), "xid_79"), 2);
}

TEST_F(NvmlSourceTest, AMissingLibraryIsAnErrorThatSaysWhatToDo) {
  const std::string path = (dir_ / "libnvidia-ml.so.1").string();
  NvmlSource source(path);
  absl::Status status = source.open();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
  EXPECT_NE(status.message().find("WEFT_NVML_LIBRARY"), std::string::npos) << status;
  EXPECT_FALSE(source.loaded());
  EXPECT_TRUE(source.gpu_bus_ids().empty());
  source.set_peers(0, kBusIdByRank);
  EXPECT_TRUE(sample(source).empty());
}

TEST_F(NvmlSourceTest, NoneLoadsNothing) {
  NvmlSource source("none");
  EXPECT_TRUE(source.open().ok());
  EXPECT_FALSE(source.loaded());
  source.set_peers(0, kBusIdByRank);
  EXPECT_TRUE(sample(source).empty());
}

TEST_F(NvmlSourceTest, AStateNvmlCannotStartFromIsAnError) {
  write_state("{not json");
  NvmlSource source(WEFT_FAKE_NVML_PATH);
  absl::Status status = source.open();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("nvmlInit_v2"), std::string::npos) << status;
  EXPECT_FALSE(source.loaded());
}

TEST_F(NvmlSourceTest, AStateFileThatDisappearsLeavesCountersOutOnce) {
  write_state(kTwoGpus);
  std::unique_ptr<NvmlSource> source = open_source(0);
  ASSERT_EQ(sample(*source).size(), 4u);
  fs::remove(state_);
  ::testing::internal::CaptureStderr();
  std::vector<Sample> first = sample(*source);
  std::vector<Sample> second = sample(*source);
  std::string log = ::testing::internal::GetCapturedStderr();
  for (const std::vector<Sample>* samples : {&first, &second}) {
    ASSERT_EQ(samples->size(), 1u);  // the GPU, no counters; no links
    EXPECT_TRUE((*samples)[0].counters.empty());
  }
  EXPECT_NE(log.find("weft: health: nvml: gpu 0 (0000:18:00.0): nvmlDeviceGetTotalEccErrors"),
            std::string::npos)
      << log;
  std::string once = "nvmlDeviceGetNvLinkState";
  size_t at = log.find(once);
  EXPECT_NE(at, std::string::npos) << log;
  EXPECT_EQ(log.find(once, at + 1), std::string::npos) << "logged twice:\n" << log;

  write_state(kTwoGpus);  // back: counters return
  EXPECT_EQ(sample(*source).size(), 4u);
}

}  // namespace
}  // namespace weft::health
