// The InfiniBand counter source against a fake sysfs tree: which rail each port carries, the
// counters and gauges it reads, and that a missing or broken tree gives fewer samples, never
// a crash.
#include "src/health/ib_source.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weft::health {
namespace {
namespace fs = std::filesystem;

// Writes the layout ib_source.hpp documents: <root>/class/infiniband/<dev>/ports/<p>/...
class FakeSysfs {
 public:
  explicit FakeSysfs(fs::path root) : root_(std::move(root)) {}

  const fs::path& root() const { return root_; }
  fs::path device_dir(const std::string& dev) const { return root_ / "class" / "infiniband" / dev; }
  fs::path port_dir(const std::string& dev, int port = 1) const {
    return device_dir(dev) / "ports" / std::to_string(port);
  }

  // An ACTIVE 100 Gb/s 4X port with every counter at zero. `ndev` (if not empty) goes in
  // gid_attrs/ndevs/0, the way RoCE names the port's interface.
  void add_port(const std::string& dev, int port, const std::string& ndev) {
    set(dev, port, "state", "4: ACTIVE");
    set(dev, port, "phys_state", "5: LinkUp");
    set(dev, port, "rate", "100 Gb/sec (4X EDR)");
    for (const char* name : kIbCounterNames) set(dev, port, absl::StrCat("counters/", name), "0");
    if (!ndev.empty()) set(dev, port, "gid_attrs/ndevs/0", ndev);
  }

  // The other way a port names its interface: a netdev of the HCA's PCI function.
  void add_netdev(const std::string& dev, const std::string& ifname) {
    fs::create_directories(device_dir(dev) / "device" / "net" / ifname);
  }

  // Writes <port>/<rel> with `text` and the newline the kernel ends each value with.
  void set(const std::string& dev, int port, const std::string& rel, const std::string& text) {
    const fs::path path = port_dir(dev, port) / rel;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text << "\n";
  }

  void remove(const std::string& dev, int port, const std::string& rel) {
    fs::remove_all(port_dir(dev, port) / rel);
  }

 private:
  fs::path root_;
};

const Sample* find_sample(const std::vector<Sample>& samples, const std::string& device) {
  for (const Sample& s : samples) {
    if (s.scope.device == device) return &s;
  }
  return nullptr;
}

std::optional<Counter> find_counter(const Sample& s, const std::string& name) {
  for (const Counter& c : s.counters) {
    if (c.name == name) return c;
  }
  return std::nullopt;
}

// The value of counter `name` of `device`'s port; a missing sample or counter fails the test.
double value_of(const std::vector<Sample>& samples, const std::string& device,
                const std::string& name) {
  const Sample* s = find_sample(samples, device);
  if (s == nullptr) {
    ADD_FAILURE() << "no sample for " << device;
    return -1;
  }
  auto c = find_counter(*s, name);
  if (!c) {
    ADD_FAILURE() << "no counter " << name << " for " << device;
    return -1;
  }
  return c->value;
}

std::vector<Sample> sample_now(IbSource& source) {
  std::vector<Sample> out;
  source.sample(absl::Now(), out);
  return out;
}

// Two RoCE-style HCAs carrying rails 0 and 1 through gid_attrs/ndevs/0, and a third (IPoIB
// style) whose only mapping is device/net/ib0.
class IbSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            absl::StrCat("weft-ib-test-", ::getpid(), "-", info->name());
    fs::remove_all(root_);
    tree_.emplace(root_);
    tree_->add_port("mlx5_0", 1, "weft-r0");
    tree_->add_port("mlx5_1", 1, "weft-r1");
    tree_->add_port("mlx5_2", 1, "");
    tree_->add_netdev("mlx5_2", "ib0");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  const std::vector<std::string> rails_ = {"weft-r0", "weft-r1"};
  fs::path root_;
  std::optional<FakeSysfs> tree_;
};

TEST_F(IbSourceTest, MapsPortsToRails) {
  IbSource source(root_.string(), rails_);
  ASSERT_EQ(source.ports().size(), 3u);
  EXPECT_EQ(source.ports()[0].device, "mlx5_0");
  EXPECT_EQ(source.ports()[0].port, 1);
  EXPECT_EQ(source.ports()[0].ifname, "weft-r0");
  EXPECT_EQ(source.ports()[0].rail, 0);
  EXPECT_EQ(source.ports()[1].ifname, "weft-r1");
  EXPECT_EQ(source.ports()[1].rail, 1);
  EXPECT_EQ(source.ports()[2].ifname, "ib0");
  EXPECT_EQ(source.ports()[2].rail, -1);

  auto samples = sample_now(source);
  ASSERT_EQ(samples.size(), 3u);
  for (const Sample& s : samples) EXPECT_EQ(s.scope.kind, ScopeKind::kIbPort);
  EXPECT_EQ(find_sample(samples, "mlx5_1")->scope.name(), "ib mlx5_1 port 1 (rail 1)");
  EXPECT_EQ(find_sample(samples, "mlx5_2")->scope.name(), "ib mlx5_2 port 1");

  // Through device/net the third port carries a rail when the rank has one named ib0.
  IbSource with_ib0(root_.string(), {"weft-r0", "weft-r1", "ib0"});
  ASSERT_EQ(with_ib0.ports().size(), 3u);
  EXPECT_EQ(with_ib0.ports()[2].rail, 2);

  // only_rails leaves out the port that carries none of the rank's rails.
  IbSource only(root_.string(), rails_, /*only_rails=*/true);
  ASSERT_EQ(only.ports().size(), 2u);
  EXPECT_EQ(sample_now(only).size(), 2u);
}

TEST_F(IbSourceTest, FirstNonEmptyNdevWinsAndDevPortPicksTheNetdev) {
  tree_->set("mlx5_0", 1, "gid_attrs/ndevs/0", "");
  tree_->set("mlx5_0", 1, "gid_attrs/ndevs/1", "weft-r1");
  // A dual-port HCA (mlx4 style): both netdevs under the one PCI function, told apart by
  // dev_port.
  tree_->add_port("mlx4_0", 1, "");
  tree_->add_port("mlx4_0", 2, "");
  for (int i = 0; i < 2; ++i) {
    const std::string ifname = absl::StrCat("ib", i);
    tree_->add_netdev("mlx4_0", ifname);
    const fs::path netdev = tree_->device_dir("mlx4_0") / "device" / "net" / ifname;
    std::ofstream(netdev / "dev_port") << i << "\n";
  }
  auto ports = IbSource::discover(root_.string(), {"ib1", "weft-r1", "ib0"});
  ASSERT_EQ(ports.size(), 5u);
  EXPECT_EQ(ports[0].device, "mlx4_0");
  EXPECT_EQ(ports[0].ifname, "ib0");
  EXPECT_EQ(ports[0].rail, 2);
  EXPECT_EQ(ports[1].port, 2);
  EXPECT_EQ(ports[1].ifname, "ib1");
  EXPECT_EQ(ports[1].rail, 0);
  EXPECT_EQ(ports[2].device, "mlx5_0");
  EXPECT_EQ(ports[2].ifname, "weft-r1");
  EXPECT_EQ(ports[2].rail, 1);
}

TEST_F(IbSourceTest, ReadsCountersAndGauges) {
  tree_->set("mlx5_0", 1, "counters/symbol_error", "12");
  tree_->set("mlx5_0", 1, "counters/port_rcv_errors", "4294967295");
  IbSource source(root_.string(), rails_);
  auto samples = sample_now(source);
  const Sample* s = find_sample(samples, "mlx5_0");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->scope.link, 1);
  EXPECT_EQ(s->scope.rail, 0);
  for (const char* name : kIbCounterNames) {
    auto c = find_counter(*s, absl::StrCat("ib_", name));
    ASSERT_TRUE(c.has_value()) << name;
    EXPECT_EQ(c->kind, CounterKind::kCumulative) << name;
  }
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_symbol_error"), 12);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_port_rcv_errors"), 4294967295.0);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_link_downed"), 0);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_port_down"), 0);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_rate_gbps"), 100);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_width"), 4);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_degraded"), 0);
  for (const char* gauge : {"ib_port_down", "ib_rate_gbps", "ib_width", "ib_degraded"}) {
    EXPECT_EQ(find_counter(*s, gauge)->kind, CounterKind::kGauge) << gauge;
  }
}

TEST_F(IbSourceTest, ACounterThatGrowsShowsTheNewValue) {
  IbSource source(root_.string(), rails_);
  EXPECT_EQ(value_of(sample_now(source), "mlx5_1", "ib_symbol_error"), 0);
  tree_->set("mlx5_1", 1, "counters/symbol_error", "250");
  tree_->set("mlx5_1", 1, "counters/link_error_recovery", "3");
  auto samples = sample_now(source);
  EXPECT_EQ(value_of(samples, "mlx5_1", "ib_symbol_error"), 250);
  EXPECT_EQ(value_of(samples, "mlx5_1", "ib_link_error_recovery"), 3);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_symbol_error"), 0);
}

TEST_F(IbSourceTest, APortNotActiveIsDown) {
  IbSource source(root_.string(), rails_);
  tree_->set("mlx5_0", 1, "state", "1: DOWN");
  tree_->set("mlx5_1", 1, "state", "2: INIT");
  auto samples = sample_now(source);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_port_down"), 1);
  EXPECT_EQ(value_of(samples, "mlx5_1", "ib_port_down"), 1);
  EXPECT_EQ(value_of(samples, "mlx5_2", "ib_port_down"), 0);
  tree_->set("mlx5_0", 1, "state", "4: ACTIVE");
  EXPECT_EQ(value_of(sample_now(source), "mlx5_0", "ib_port_down"), 0);
}

TEST_F(IbSourceTest, ALowerRateOrWidthThanSeenIsDegraded) {
  IbSource source(root_.string(), rails_);
  EXPECT_EQ(value_of(sample_now(source), "mlx5_0", "ib_degraded"), 0);
  tree_->set("mlx5_0", 1, "rate", "50 Gb/sec (2X EDR)");
  auto samples = sample_now(source);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_degraded"), 1);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_width"), 2);
  EXPECT_EQ(value_of(samples, "mlx5_0", "ib_rate_gbps"), 50);
  EXPECT_EQ(value_of(samples, "mlx5_1", "ib_degraded"), 0);
  // Width alone: the same speed over fewer lanes is still a downgrade.
  tree_->set("mlx5_1", 1, "rate", "100 Gb/sec (2X HDR)");
  EXPECT_EQ(value_of(sample_now(source), "mlx5_1", "ib_degraded"), 1);
  // Retrained back to full width and speed: no longer degraded.
  tree_->set("mlx5_0", 1, "rate", "100 Gb/sec (4X EDR)");
  EXPECT_EQ(value_of(sample_now(source), "mlx5_0", "ib_degraded"), 0);
  // A down port's rate says nothing: not degraded, and not a new best.
  tree_->set("mlx5_0", 1, "state", "1: DOWN");
  tree_->set("mlx5_0", 1, "rate", "10 Gb/sec (4X SDR)");
  EXPECT_EQ(value_of(sample_now(source), "mlx5_0", "ib_degraded"), 0);
}

TEST_F(IbSourceTest, MissingFilesLeaveTheirCountersOut) {
  tree_->remove("mlx5_0", 1, "counters/link_downed");
  tree_->set("mlx5_0", 1, "counters/symbol_error", "not a number");
  tree_->remove("mlx5_1", 1, "counters");
  tree_->remove("mlx5_1", 1, "rate");
  IbSource source(root_.string(), rails_);
  auto samples = sample_now(source);
  ASSERT_EQ(samples.size(), 3u);
  const Sample* s0 = find_sample(samples, "mlx5_0");
  EXPECT_FALSE(find_counter(*s0, "ib_link_downed").has_value());
  EXPECT_FALSE(find_counter(*s0, "ib_symbol_error").has_value());
  EXPECT_TRUE(find_counter(*s0, "ib_port_rcv_errors").has_value());
  EXPECT_EQ(s0->counters.size(), kIbCounterNames.size() - 2 + 4);
  // No counters and no rate: the state alone is still worth a sample.
  const Sample* s1 = find_sample(samples, "mlx5_1");
  ASSERT_EQ(s1->counters.size(), 1u);
  EXPECT_EQ(s1->counters[0].name, "ib_port_down");
}

TEST_F(IbSourceTest, AnUnreadablePortIsLoggedOnceAndLeftOut) {
  IbSource source(root_.string(), rails_);
  fs::remove_all(tree_->port_dir("mlx5_1"));
  ::testing::internal::CaptureStderr();
  auto first = sample_now(source);
  auto second = sample_now(source);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(first.size(), 2u);
  EXPECT_EQ(second.size(), 2u);
  EXPECT_EQ(find_sample(second, "mlx5_1"), nullptr);
  const size_t at = err.find("weft: health: ib: mlx5_1 port 1");
  EXPECT_NE(at, std::string::npos) << err;
  EXPECT_EQ(err.find("weft: health: ib:", at + 1), std::string::npos) << err;
}

TEST_F(IbSourceTest, NoTreeMeansNoSamples) {
  for (const fs::path& root : {root_ / "missing", root_ / "empty", root_ / "no-devices"}) {
    fs::create_directories(root_ / "empty");
    fs::create_directories(root_ / "no-devices" / "class" / "infiniband");
    IbSource source(root.string(), rails_);
    EXPECT_TRUE(source.ports().empty()) << root;
    EXPECT_TRUE(sample_now(source).empty()) << root;
  }
  IbSource empty_string("", {});
  EXPECT_TRUE(sample_now(empty_string).empty());
}

TEST(IbRateText, Parses) {
  auto r = parse_ib_rate("100 Gb/sec (4X EDR)\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->gbps, 100);
  EXPECT_EQ(r->width, 4);
  r = parse_ib_rate("2.5 Gb/sec (1X SDR)");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->gbps, 2.5);
  EXPECT_EQ(r->width, 1);
  r = parse_ib_rate("25 Gb/sec");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->width, 0);
  EXPECT_FALSE(parse_ib_rate("").has_value());
  EXPECT_FALSE(parse_ib_rate("fast").has_value());
  EXPECT_FALSE(parse_ib_rate("nan Gb/sec").has_value());
  EXPECT_TRUE(ib_state_active("4: ACTIVE\n"));
  EXPECT_FALSE(ib_state_active("1: DOWN"));
  EXPECT_FALSE(ib_state_active("5: ACTIVE_DEFER"));
  EXPECT_FALSE(ib_state_active(""));
}

}  // namespace
}  // namespace weft::health
