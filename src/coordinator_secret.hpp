// The secret of ranks that meet through WEFT_COORDINATOR.
//
// Such ranks cannot hand each other a random secret the way a UniqueId does, and anything
// derived from the coordinator's address is known to whoever can connect to it. Their secret
// is, first found:
//   1. WEFT_JOB_SECRET, the same text on every rank;
//   2. the launcher's own random per-job key: Open MPI's mpirun gives every rank of a job
//      OMPI_MCA_orte_precondition_transports (made for the same purpose, for PSM and OFI),
//      which only the job's processes and their user can read;
//   3. the user's secret file, WEFT_JOB_SECRET_FILE (~/.weft/job_secret): made with 16 random
//      bytes on first use, refused when anyone but its owner may read it. On a cluster with a
//      shared home every host sees the same one; elsewhere copy it, or set WEFT_JOB_SECRET.
// That is the trust model of ssh keys and Erlang's cookie: a process of the same user can
// join, as it could already attach a debugger to the ranks; nobody else can.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "src/base/env.hpp"
#include "src/base/job_secret.hpp"

namespace weft {

/// The secret, and where it came from (for messages).
struct CoordinatorSecret {
  JobSecret secret{};
  std::string source;  ///< "WEFT_JOB_SECRET", "mpirun's job key" or the file's path
};

absl::StatusOr<CoordinatorSecret> coordinator_secret(const EnvLookup& lookup = read_env);

/// WEFT_JOB_SECRET_FILE with a leading "~" replaced by the home directory.
std::string secret_file_path(const EnvLookup& lookup = read_env);

}  // namespace weft
