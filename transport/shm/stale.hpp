// Stale rings: names left in /dev/shm by a job that died before both ends of a ring had
// attached (once both have, the name is gone already; see Ring::attach). Each ring records
// the pid that created it; a ring whose creator no longer runs belongs to nobody. A creator
// killed while it made the ring leaves a header that never became ready: a creator finishes
// it within milliseconds, so one still unfinished kAbandonedAfterSeconds after the segment
// was made is abandoned too.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft::transport::shm {

struct SharedSegment {
  std::string name;      ///< e.g. "weft-0123abcd...-1-from-0" (in /dev/shm)
  long long bytes = 0;
  int creator_pid = 0;   ///< 0 when the segment does not say (another version, half made)
  std::string state;     ///< "live", "stale", "abandoned" (half made, long ago) or "unknown"
                         ///< (not a ring this weft can read, or half made just now)
  bool removed = false;
};

/// How long after its creation a ring whose header never became ready counts as abandoned.
inline constexpr int kAbandonedAfterSeconds = 5;

/// Lists every weft segment in /dev/shm and, unless `dry_run`, removes the stale and the
/// abandoned ones (half made at least `abandoned_after` seconds ago). Segments it cannot
/// read are left alone.
absl::StatusOr<std::vector<SharedSegment>> sweep_stale_rings(
    bool dry_run, int abandoned_after = kAbandonedAfterSeconds);

/// Once per process, quietly: what a new communicator does so a crashed job's rings do not
/// pile up. Failures are ignored (the sweep is a courtesy, not a requirement).
void sweep_stale_rings_once();

}  // namespace weft::transport::shm
