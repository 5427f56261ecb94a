// Who stopped answering? After a call fails on a deadline or a broken link, a rank asks
// every peer whether it is alive (transport/tcp/liveness.hpp) and names the rank at fault in
// its error, saying what it saw itself and what other ranks told it.
//
// A deadline alone blames whichever neighbours the rank happened to wait on, and a link that
// a failing peer closed blames that peer, though both may be healthy: in a ring every rank
// waits on a neighbour. Asking every rank directly finds the one that answers nothing (a
// stopped or hung process) or whose port refuses (an exited one). Every survivor asks the
// same ranks the same question, so where a rank is stopped or gone for everyone they all
// name it, without a round of agreement that a stopped rank could hold up. A stopped rank
// is blamed before a gone one: ranks that gave up and exited are gone too, but only after
// the fault. A killed process stays silent until its exit closes its port, so a rank that
// others saw refuse is gone even where this rank only met its silence.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "src/base/peer_info.hpp"
#include "transport/tcp/liveness.hpp"

namespace weft::detail {

struct Blamed {
  absl::Status status;                ///< the failure, with the rank at fault named first
  transport::tcp::Blame conclusion;  ///< what this rank now tells those who ask it
};

/// Whether `failure` may be a peer's fault worth asking about (a deadline or a lost link;
/// not bad arguments, ranks that disagree, or an abort).
bool worth_blaming(const absl::Status& failure);

/// Asks every rank in `peers` but `control.rank` (their published control addresses) for at
/// most `wait`, and returns `failure` with what was found said first.
Blamed blame(const absl::Status& failure, const transport::TransportInit& control,
             const std::vector<PeerInfo>& peers, absl::Duration wait);

/// What `blame` concludes from the answers `rank` got to its liveness queries (each waited
/// `wait` at most); apart so that every combination of answers can be tested.
Blamed judge(const absl::Status& failure, int rank,
             const std::vector<transport::tcp::PeerAnswer>& answers, absl::Duration wait);

}  // namespace weft::detail
