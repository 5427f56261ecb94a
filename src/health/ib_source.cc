#include "src/health/ib_source.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weft::health {
namespace fs = std::filesystem;
namespace {

void log_line(const std::string& msg) {
  std::fprintf(stderr, "weft: health: ib: %s\n", msg.c_str());
}

// Sets `text` to the file's contents less surrounding whitespace. sysfs attributes are a
// page at most and a read returns at once (the kernel formats the value on read; nothing
// waits on the device), so a plain open/read/close is both the cheapest and a non-blocking
// way in. The cap only guards a fake tree holding a big file.
absl::Status read_small(const fs::path& path, std::string& text) {
  text.clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, path.string());
  char buf[512];
  while (text.size() < 4096) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, path.string());
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  text = std::string(absl::StripAsciiWhitespace(text));
  return absl::OkStatus();
}

// "mlx5_10" after "mlx5_2", and ports and gid indexes by number: a trailing number compares
// as a number when the text before it is the same.
bool natural_less(const std::string& a, const std::string& b) {
  auto split = [](const std::string& s) {
    size_t i = s.size();
    while (i > 0 && absl::ascii_isdigit(static_cast<unsigned char>(s[i - 1]))) --i;
    return std::pair<absl::string_view, absl::string_view>(absl::string_view(s).substr(0, i),
                                                           absl::string_view(s).substr(i));
  };
  auto [stem_a, num_a] = split(a);
  auto [stem_b, num_b] = split(b);
  uint64_t na = 0, nb = 0;
  if (stem_a == stem_b && absl::SimpleAtoi(num_a, &na) && absl::SimpleAtoi(num_b, &nb) &&
      na != nb) {
    return na < nb;
  }
  return a < b;
}

// Entry names of a directory, in natural order; none when it is missing or unreadable.
// The error_code overloads throughout: a directory that vanishes mid-walk must not throw.
std::vector<std::string> list_dir(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end(), natural_less);
  return names;
}

// The interface a port carries. RoCE ports name it per GID in gid_attrs/ndevs/<i> (an
// unused GID reads as an error or empty); IPoIB and drivers without gid_attrs leave only the
// netdevs of the HCA's PCI function, where dev_port (port - 1) tells a dual-port HCA's two
// apart.
std::string port_ifname(const fs::path& dev_dir, const fs::path& port_dir, int port) {
  const fs::path ndevs = port_dir / "gid_attrs" / "ndevs";
  std::string text;
  for (const std::string& index : list_dir(ndevs)) {
    int gid = 0;  // only GID indexes: not the temporary files a fake tree is written with
    if (!absl::SimpleAtoi(index, &gid)) continue;
    if (read_small(ndevs / index, text).ok() && !text.empty()) return text;
  }
  const fs::path net = dev_dir / "device" / "net";
  const std::vector<std::string> netdevs = list_dir(net);
  for (const std::string& ifname : netdevs) {
    int value = -1;
    if (read_small(net / ifname / "dev_port", text).ok() && absl::SimpleAtoi(text, &value) &&
        value == port - 1) {
      return ifname;
    }
  }
  return netdevs.empty() ? std::string() : netdevs.front();
}

void add(Sample& s, std::string name, double value, CounterKind kind) {
  s.counters.push_back(Counter{.name = std::move(name), .value = value, .kind = kind});
}

}  // namespace

std::optional<IbRate> parse_ib_rate(std::string_view std_text) {
  // The kernel writes "%d%s Gb/sec (%dX%s)": "2.5 Gb/sec (1X SDR)", "100 Gb/sec (4X EDR)".
  const absl::string_view text =
      absl::StripAsciiWhitespace(absl::string_view(std_text.data(), std_text.size()));
  IbRate rate;
  const size_t space = text.find(' ');
  if (!absl::SimpleAtod(text.substr(0, space), &rate.gbps) || !std::isfinite(rate.gbps) ||
      rate.gbps < 0) {
    return std::nullopt;
  }
  if (space == absl::string_view::npos) return rate;
  const size_t open = text.find('(', space);
  if (open == absl::string_view::npos) return rate;
  const size_t x = text.find_first_of("Xx", open);
  int width = 0;
  if (x != absl::string_view::npos &&
      absl::SimpleAtoi(text.substr(open + 1, x - open - 1), &width) && width > 0) {
    rate.width = width;
  }
  return rate;
}

bool ib_state_active(std::string_view std_text) {
  // "4: ACTIVE"; ACTIVE_DEFER (5) is a port on its way down, so only 4 counts.
  const absl::string_view text =
      absl::StripAsciiWhitespace(absl::string_view(std_text.data(), std_text.size()));
  const size_t colon = text.find(':');
  int code = 0;
  if (colon != absl::string_view::npos && absl::SimpleAtoi(text.substr(0, colon), &code)) {
    return code == 4;
  }
  return text == "ACTIVE";
}

std::vector<IbPort> IbSource::discover(const std::string& sysfs_root,
                                       const std::vector<std::string>& rail_ifnames) {
  std::vector<IbPort> ports;
  if (sysfs_root.empty()) return ports;  // not the current directory's class/infiniband
  const fs::path class_dir = fs::path(sysfs_root) / "class" / "infiniband";
  for (const std::string& device : list_dir(class_dir)) {
    const fs::path dev_dir = class_dir / device;
    for (const std::string& port_name : list_dir(dev_dir / "ports")) {
      int port = 0;
      if (!absl::SimpleAtoi(port_name, &port) || port <= 0) continue;
      const fs::path port_dir = dev_dir / "ports" / port_name;
      IbPort p{.device = device,
               .port = port,
               .ifname = port_ifname(dev_dir, port_dir, port),
               .rail = -1,
               .dir = port_dir.string()};
      if (!p.ifname.empty()) {
        auto it = std::find(rail_ifnames.begin(), rail_ifnames.end(), p.ifname);
        if (it != rail_ifnames.end()) p.rail = static_cast<int>(it - rail_ifnames.begin());
      }
      ports.push_back(std::move(p));
    }
  }
  return ports;
}

IbSource::IbSource(std::string sysfs_root, std::vector<std::string> rail_ifnames, bool only_rails)
    : ports_(discover(sysfs_root, rail_ifnames)) {
  if (only_rails) {
    std::erase_if(ports_, [](const IbPort& p) { return p.rail < 0; });
  }
  history_.resize(ports_.size());
}

void IbSource::sample(absl::Time now, std::vector<Sample>& out) {
  for (size_t i = 0; i < ports_.size(); ++i) {
    const IbPort& port = ports_[i];
    History& history = history_[i];
    const fs::path dir = port.dir;
    // The state file is there for every port of every driver; unreadable, the port (or the
    // whole device: a driver unbound, a hot-unplugged HCA) is gone, not merely idle.
    std::string state;
    if (absl::Status read = read_small(dir / "state", state); !read.ok()) {
      if (!history.logged) {
        log_line(absl::StrCat(port.device, " port ", port.port, ": left out: ", read.message()));
        history.logged = true;
      }
      continue;
    }
    Sample s;
    s.scope.kind = ScopeKind::kIbPort;
    s.scope.device = port.device;
    s.scope.link = port.port;
    s.scope.rail = port.rail;
    s.time = now;
    for (const char* name : kIbCounterNames) {
      std::string text;
      uint64_t value = 0;
      if (read_small(dir / "counters" / name, text).ok() && absl::SimpleAtoi(text, &value)) {
        add(s, absl::StrCat("ib_", name), static_cast<double>(value), CounterKind::kCumulative);
      }
    }
    const bool active = ib_state_active(state);
    add(s, "ib_port_down", active ? 0 : 1, CounterKind::kGauge);

    std::string rate_text;
    std::optional<IbRate> rate;
    if (read_small(dir / "rate", rate_text).ok()) rate = parse_ib_rate(rate_text);
    if (rate) {
      add(s, "ib_rate_gbps", rate->gbps, CounterKind::kGauge);
      if (rate->width > 0) add(s, "ib_width", rate->width, CounterKind::kGauge);
      // A port that is not ACTIVE reports whatever rate it last trained to or the lowest
      // one, which says nothing (ib_port_down says it): it neither sets the best nor counts
      // as degraded. A port that comes up already degraded is not caught here; it looks like
      // a slower port.
      bool degraded = false;
      if (active) {
        degraded = rate->gbps < history.best_gbps ||
                   (rate->width > 0 && rate->width < history.best_width);
        history.best_gbps = std::max(history.best_gbps, rate->gbps);
        history.best_width = std::max(history.best_width, rate->width);
      }
      add(s, "ib_degraded", degraded ? 1 : 0, CounterKind::kGauge);
    }
    out.push_back(std::move(s));
  }
}

}  // namespace weft::health
