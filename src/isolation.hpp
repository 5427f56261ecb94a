// What a rank does about its own links and rails that health judges FAILING: it proposes to
// isolate them, and after a quiet time to bring them back on probation. A link to a peer is
// FAILING when its own counters say so, or the NVLink to that peer's GPU; a GPU FAILING
// (uncorrected ECC, a fatal XID) takes all its links to ranks of its host; a rail is the one
// an InfiniBand port FAILING carries. Proposals ride the call
// check (collectives/call_check.hpp), so every rank adopts the same change at the end of the
// same call and reroutes (src/router.hpp); nothing here touches a link.
//
//   in use --FAILING--> (proposed) --adopted--> ISOLATED --quiet time--> (proposed restore)
//     ^                                                                        |
//     +---- probation time without FAILING ---- PROBATION <------adopted-------+
//                                                   |
//                                                   +--FAILING--> (proposed) --> ISOLATED
//
// Both ends of a link judge it and may both propose; the call check keeps one proposal per
// call, and the other is then already adopted. A link judged FAILING is told at once
// (Options::failing), so that the call under way can go around it. A rail is its rank's
// alone. A judge steps down on its own while a link is isolated (little traffic, nothing to
// judge by): only the quiet time brings it back, and only its traffic on probation decides
// whether it stays.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collectives/call_check.hpp"
#include "src/base/mutex.hpp"
#include "src/health/judge.hpp"

namespace weft {

class Isolation {
 public:
  struct Options {
    int rank = 0;
    absl::Duration quiet = absl::Seconds(30);      ///< isolated this long before a probe
    absl::Duration probation = absl::Seconds(10);  ///< in use this long, not FAILING, to be HEALTHY
    /// By peer rank: what carries the link ("tcp", "shm"), as its health scope names it.
    std::vector<std::string> link_device;
    /// The other ranks of this rank's host: the links its GPU's NVLinks serve.
    std::vector<int> host_peers;
    /// Called on the monitor's thread, outside any lock, when the link to `peer` is judged
    /// FAILING while in use: the link may act at once, before a call adopts the isolation.
    std::function<void(int peer)> failing;
  };
  /// Reports a state this rank's link entered (ISOLATED, PROBATION, HEALTHY), for the health
  /// log and snapshot (health::Monitor::record). Called on the collective's thread.
  using Report = std::function<void(const health::Change&)>;

  Isolation(Options options, Report report);

  /// Thread-safe (the monitor's thread): a change the judge made to one of this rank's scopes.
  /// A link's (kLink), an NVLink's to a rank (kNvlink, peer >= 0), this rank's GPU's (kGpu)
  /// and a port's under a rail (kIbPort, rail >= 0) count.
  void judged(const health::Change& change);

  /// Whether a proposal may be due, ever: one atomic load, so that a call reads no clock
  /// while nothing is judged FAILING, isolated or on probation.
  bool pending() const { return due_ns_.load(std::memory_order_acquire) != INT64_MAX; }
  /// The collective's thread, at a call: the change this rank proposes at `now`, if any.
  std::optional<RouteChange> proposal(absl::Time now);

  /// The collective's thread: every rank adopted `change` in a call. `note`, if any, says
  /// what the route could not do about it (no ring avoids the link).
  void adopted(const RouteChange& change, absl::Time now, std::string note = "");

 private:
  enum class Use { kInUse, kIsolated, kProbation };
  /// A link to a peer, or one of this rank's rails.
  struct Target {
    bool rail = false;
    int id = 0;  ///< the peer, or the rail
    auto operator<=>(const Target&) const = default;
  };
  struct Link {
    health::Scope scope;  ///< whose state it reports
    Use use = Use::kInUse;
    /// Each scope's last word on it: the link's own judge, its NVLinks', the GPU's (a GPU
    /// speaks for every link on its host). One still FAILING keeps the link failing, whatever
    /// another says since.
    std::map<health::Scope, health::State> judges;
    health::State judge() const {
      health::State worst = health::State::kHealthy;
      for (const auto& [scope, state] : judges) worst = std::max(worst, state);
      return worst;
    }
    bool failing = false;   ///< judged FAILING, and not isolated since
    absl::Time since;       ///< entered `use`
    health::Reason reason;  ///< of the last FAILING
  };
  /// The earliest time a proposal or a probation's end can be due, under mu_.
  void refresh_due() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  RouteChange change_of(Target t, bool isolate) const;
  /// Records the judge's `change` on the entry of `target`; whether it made a target in use
  /// FAILING.
  bool judge(Target target, const health::Change& change) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The entry of the link to `peer`, its scope set.
  Link& link_to(int peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The change `link` just made, from `from`, for `why` where no counter is it.
  static health::Change report_of(const Link& link, health::State from, std::string why = "");

  const Options options_;
  const Report report_;
  Mutex mu_;
  std::map<Target, Link> links_ ABSL_GUARDED_BY(mu_);  ///< those ever judged or isolated
  /// absl::ToUnixNanos of the earliest due time; INT64_MAX: nothing pending.
  std::atomic<int64_t> due_ns_{INT64_MAX};
};

}  // namespace weft
