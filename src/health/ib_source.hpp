// InfiniBand port counters, read from sysfs: the "ib" counter source of the health monitor.
//
// Why sysfs rather than libibverbs' ibv_query_port / the PMA MADs perftest and
// ibqueryerrors send: the kernel exports the same port state, rate and error counters under
// /sys/class/infiniband, they are readable without opening the device (no verbs context, no
// libibverbs on machines that lack it, no privileges), every read is a small file that
// returns at once, and tests and the virtual cluster can fake the whole thing with a tree of
// text files by pointing the root somewhere else.
//
// Counters are reported as read. In sysfs they are the port's PMA counters: the error
// counters are 4 to 16 bits wide and stop at their maximum, the data counters 32-bit on
// drivers without the extended set, and a reset (perfquery -R) makes one go down. The policy
// treats a value that goes down as a new baseline and a stuck one as no news. This source
// judges nothing except the rate and width downgrade, which needs a history only it keeps.
//
// The tree it reads, one directory per port (what the kernel writes, and what tests and
// the virtual cluster write for rail K):
//
//   <root>/class/infiniband/mlx5_<K>/
//     ports/1/
//       state               "4: ACTIVE" (also "1: DOWN", "2: INIT", "3: ARMED")
//       phys_state          "5: LinkUp" (also "3: Disabled", "2: Polling"; not read yet)
//       rate                "100 Gb/sec (4X EDR)": speed, then lanes in "(<N>X"
//       counters/<name>     one decimal number each, <name> one of kIbCounterNames
//       gid_attrs/ndevs/0   rail K's interface name, "weft-r<K>" (RoCE fills these in)
//     device/net/<ifname>/  optional: the netdevs of the HCA's PCI function (IPoIB "ib0"),
//                           used when no gid_attrs/ndevs/<i> names one; dev_port inside
//                           (port - 1) picks among several
//
// Each port maps to an interface (the first non-empty gid_attrs/ndevs/<i> in index order,
// else an entry of device/net), and that interface to a rail: its position in the rank's
// rail list (-1: none of this rank's rails).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/health/sample.hpp"

namespace weft::health {

/// The files of <port>/counters/ this source reads; the counter is named "ib_" + the file.
/// The error counters ibqueryerrors checks that describe this host's own link (VL15 drops
/// and the switch relay and constraint errors are left out).
inline constexpr std::array<const char*, 8> kIbCounterNames = {
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
    "port_rcv_remote_physical_errors",
};

/// One port found under <root>/class/infiniband.
struct IbPort {
  std::string device;  ///< HCA name: "mlx5_0"
  int port = 0;        ///< port number, from 1
  std::string ifname;  ///< the interface it carries; empty when none was found
  int rail = -1;       ///< position of `ifname` in the rail list; -1: none of them
  std::string dir;     ///< <root>/class/infiniband/<device>/ports/<port>
};

/// "100 Gb/sec (4X EDR)" -> {100, 4}; width 0 when the text has no "(<N>X".
struct IbRate {
  double gbps = 0;
  int width = 0;
};
std::optional<IbRate> parse_ib_rate(std::string_view text);

/// Whether a port's `state` text says ACTIVE ("4: ACTIVE"); anything else, unreadable
/// included, is down as far as traffic goes.
bool ib_state_active(std::string_view text);

class IbSource : public Source {
 public:
  /// Finds the ports once, now (HCAs do not appear while a job runs). `sysfs_root` is "/sys"
  /// outside tests; `rail_ifnames` are this rank's tcp rails in order. With `only_rails`,
  /// ports carrying none of them are left out. A root without class/infiniband (a machine
  /// without InfiniBand) simply has no ports; that is not an error. An empty root has none.
  IbSource(std::string sysfs_root, std::vector<std::string> rail_ifnames,
           bool only_rails = false);

  /// Every port under `sysfs_root`, sorted by device then port, each mapped to its rail.
  static std::vector<IbPort> discover(const std::string& sysfs_root,
                                      const std::vector<std::string>& rail_ifnames);

  const std::vector<IbPort>& ports() const { return ports_; }

  std::string_view name() const override { return "ib"; }

  /// One Sample per port (ScopeKind::kIbPort). Cumulative: "ib_<counter>" for each counter
  /// file present. Gauges: ib_port_down, and when `rate` parses ib_rate_gbps, ib_width (if
  /// the text has one) and ib_degraded. A port whose state cannot be read is logged once and
  /// left out. Not thread-safe: the monitor's thread alone calls it.
  void sample(absl::Time now, std::vector<Sample>& out) override;

 private:
  // The best rate and width seen while the port was ACTIVE: a link that retrains to fewer
  // lanes or a lower speed (a bad cable or transceiver) stays up and passes traffic, slower,
  // and shows no error counter; only a drop from what it had shows it.
  struct History {
    double best_gbps = 0;
    int best_width = 0;
    bool logged = false;  // the port's unreadable state has been reported
  };

  std::vector<IbPort> ports_;
  std::vector<History> history_;  // parallel to ports_
};

}  // namespace weft::health
