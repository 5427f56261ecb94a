// What the health monitor reads: counters, each with the scope it describes (a link between
// two ranks, one rail of it, a GPU, an NVLink, an InfiniBand port) and the time it was read.
// Every counter source (tcp, the transports' own observations, NVML, InfiniBand sysfs)
// returns Samples through the one Source interface, so the policy judges them all alike.
#pragma once

#include <compare>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"

namespace weft::health {

enum class ScopeKind : int {
  kLink = 0,    ///< this rank's link to `peer`, whatever carries it
  kRail = 1,    ///< rail `rail` (interface `device`) of the tcp link to `peer`
  kGpu = 2,     ///< GPU `gpu` (PCI bus id `device`)
  kNvlink = 3,  ///< NVLink `link` of GPU `gpu`; its far end is `device` (a PCI bus id), the
                ///< GPU of rank `peer` (-1: of no rank in this job)
  kIbPort = 4,  ///< port `link` of InfiniBand device `device`; it carries rail `rail` (-1: none
                ///< of this rank's rails)
};
inline constexpr int kNumScopeKinds = 5;

/// "link", "rail", "gpu", "nvlink", "ib_port": the names JSON and Prometheus use.
const char* scope_kind_name(ScopeKind kind);

struct Scope {
  ScopeKind kind = ScopeKind::kLink;
  int peer = -1;
  int rail = -1;
  int gpu = -1;
  int link = -1;
  std::string device;

  /// How a person reads it: "link to rank 3", "rail 1 (weft-r1) to rank 3", "gpu 0
  /// (00000000:18:00.0)", "nvlink 2 of gpu 0 to rank 1", "ib mlx5_1 port 1 (rail 1)".
  std::string name() const;
  auto operator<=>(const Scope&) const = default;
};

/// Cumulative counters only grow (errors, retransmits, bytes): the policy judges their delta
/// or rate. Gauges are a level (rtt, "nvlink_down" 0/1): the policy judges the value.
enum class CounterKind : int { kCumulative = 0, kGauge = 1 };

struct Counter {
  std::string name;  ///< lower_snake_case, unique within its scope: "tcp_retransmits"
  double value = 0;
  CounterKind kind = CounterKind::kCumulative;
  /// Counted from zero by weft itself (NVML's XID events): one that first appears after the
  /// scope's first reading was zero at the reading before. Any other counter that appears
  /// late (a read that failed at first) is only a baseline, like every first reading.
  bool counted_here = false;
};

struct Sample {
  Scope scope;
  absl::Time time;
  std::vector<Counter> counters;
};

/// One kind of counter reader. sample() runs on the monitor's thread, off the data path: it
/// may allocate, read files and make system calls, but must return within a few
/// milliseconds (no blocking wait). An error reading one device is logged once by the
/// source and leaves that device out; it never throws.
class Source {
 public:
  virtual ~Source() = default;
  /// "tcp", "link", "nvml", "ib": for logs and `weft info`.
  virtual std::string_view name() const = 0;
  /// Appends what it reads now to `out`, each Sample stamped with `now`.
  virtual void sample(absl::Time now, std::vector<Sample>& out) = 0;
};

}  // namespace weft::health
