// Shrink: after a peer died, the survivors agree on who is left and build a communicator of
// their own, as ncclCommShrink does, except that weft finds the dead ranks itself.
//
// Every communicator keeps a control transport for this alone: a tcp listener with a job id
// of its own, published in bootstrap as "control". Survivors can reach each other through it
// when the data links are broken, and no half-sent collective bytes sit on its links.
//
// 1. Probe. Each rank connects to every other rank's control listener, all at once (a thread
//    per peer). A peer is reached once the handshake completes. It is gone when its listener
//    refuses (it exited: the listener was up since bootstrap), when its process has exited
//    (same host), or at the probe deadline (stopped, stuck, or not calling shrink).
// 2. Report. Each rank sends the set it reached to its leader: the lowest rank among
//    itself and those it reached.
// 3. Decide. The leader admits the ranks that reported to it, in rank order, each only if it
//    and every rank admitted before it reached each other, so every survivor can talk to
//    every other. It sends each of them the survivors and the new job id (a hash of the old
//    one and the survivors). A rank left out returns an error.
// 4. Exchange. The survivors create the new communicator; its bootstrap exchange gathers and
//    scatters their PeerInfo through the leader over the same control links.
//
// Limits: a rank that enters shrink after the others' probe deadline is left out. With such
// stragglers two leaders may each form a communicator; their job ids differ, so they never
// mix. Shrink returns within twice the timeout: once for the probe, once for the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/base/deadline.hpp"
#include "src/base/peer_info.hpp"
#include "transport/transport.hpp"

namespace weft::detail {

/// The name under which each rank publishes its control listener in bootstrap.
inline constexpr char kControlAddress[] = "control";
/// XORed into the job id for the control transport, so that its handshakes never match a
/// data transport's.
inline constexpr uint64_t kControlJobSalt = 0x5348524b434f4e54;  // "SHRKCONT"

class ShrinkAgreement {
 public:
  struct Outcome {
    int rank = -1;  ///< in the new communicator
    int size = 0;
    uint64_t job_id = 0;
    std::vector<int> survivors;  ///< old ranks, ascending; new rank i is survivors[i]
    std::vector<int> dropped;    ///< old ranks left out
  };

  /// `peers` are the old communicator's, indexed by rank; `control` is its control transport
  /// and `control_init` what that transport was made with (for liveness queries).
  ShrinkAgreement(int rank, std::vector<PeerInfo> peers, transport::Transport& control,
                  const transport::TransportInit& control_init, uint64_t job_id);

  /// Steps 1-3.
  absl::StatusOr<Outcome> agree(absl::Duration timeout);
  /// Step 4, as Comm::create's exchange: every survivor's PeerInfo, by new rank.
  absl::StatusOr<std::vector<PeerInfo>> exchange(const PeerInfo& self, Deadline deadline);

 private:
  /// Step 1: a control link to every peer reached (null for the others).
  void probe(Deadline deadline);
  /// Steps 2-3 on the leader: the reports, then the decision sent to every reporter.
  absl::StatusOr<Outcome> decide(Deadline deadline);
  /// Steps 2-3 elsewhere: the report sent, the decision received.
  absl::StatusOr<Outcome> follow(Deadline deadline);
  Outcome outcome_of(const std::vector<bool>& survivors, uint64_t job_id) const;

  const int rank_;
  const std::vector<PeerInfo> peers_;
  transport::Transport& control_;
  const transport::TransportInit control_init_;
  const uint64_t job_id_;
  std::vector<std::unique_ptr<transport::Pair>> links_;  // by old rank
  int leader_ = -1;
  std::vector<int> survivors_;  // once agreed
};

}  // namespace weft::detail
