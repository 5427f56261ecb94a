// Link health as the C++ API shows it: the state of every link, rail, GPU, NVLink and
// InfiniBand port this rank watches, with the counters behind it (Communicator::health),
// and each state change in turn (Communicator::next_health_change). docs/HEALTH.md says
// what each counter means and which rule judges it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "weft/export.h"

namespace weft {

enum class HealthState : int {
  kHealthy = 0,
  kSuspect = 1,  ///< a counter passed its SUSPECT threshold: the link works, but is wearing
  kFailing = 2,  ///< a counter passed its FAILING threshold: expect errors or slowness
  kIsolated = 3,   ///< taken out of use: every rank routes around it until its quiet time ends
  kProbation = 4,  ///< back in use after isolation, watched: failing again isolates it again
};
/// "HEALTHY", "SUSPECT", "FAILING", "ISOLATED", "PROBATION".
WEFT_API const char* health_state_name(HealthState state);

/// What a state describes.
struct HealthScope {
  std::string kind;  ///< "link", "rail", "gpu", "nvlink", "ib_port"
  std::string name;  ///< as people read it: "rail 1 (weft-r1) to rank 3"
  int peer = -1;     ///< link, rail: the rank at the other end; nvlink: the rank it reaches
  int rail = -1;     ///< rail: its number; ib_port: the rail it carries (-1: none)
  int gpu = -1;      ///< gpu, nvlink: the GPU's NVML index
  int link = -1;     ///< nvlink: its number; ib_port: the port number
  std::string device;  ///< rail: interface; gpu: PCI bus id; nvlink: far end's; ib_port: HCA
};

struct HealthCounter {
  std::string name;        ///< "tcp_retransmits", "nvlink_crc_flit", ...
  double value = 0;        ///< as last read
  double rate = 0;         ///< per second over the policy's window (cumulative counters)
  bool cumulative = true;  ///< false: a level (rtt), whose rate means nothing
};

struct LinkHealth {
  HealthScope scope;
  HealthState state = HealthState::kHealthy;
  absl::Time since = absl::InfinitePast();  ///< when it entered `state`
  std::string reason;  ///< "tcp_retransmits rate 96.5/s >= 20/s over 5s"; empty if HEALTHY
  std::vector<HealthCounter> counters;
  /// When `counters` were read: the monitor reads every WEFT_HEALTH_INTERVAL_MS, so two
  /// snapshots taken a second apart may hold readings 0.5 or 1.5 s apart.
  absl::Time read = absl::InfinitePast();
};

struct HealthChange {
  absl::Time time;
  HealthScope scope;
  HealthState from = HealthState::kHealthy;
  HealthState to = HealthState::kHealthy;
  std::string counter;  ///< the counter whose rule decided
  double value = 0;     ///< its reading
  double measured = 0;  ///< its delta, rate or value, as the rule measures it
  std::string measure;  ///< "delta", "rate", "ratio" or "value"
  double threshold = 0;
  absl::Duration window;
  std::string reason;   ///< all of the above in one line
};

}  // namespace weft
