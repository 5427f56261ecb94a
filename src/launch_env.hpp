// Who am I in this job? Reads rank, size and local rank from whatever launched the process:
// WEFT_RANK/WEFT_SIZE set by hand, Open MPI's mpirun, Slurm's srun, or an MPICH/Hydra
// (PMI) mpiexec. Every variable goes through an EnvLookup so tests can fake the environment.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "src/base/env.hpp"

namespace weft {

/// What the launcher told this process. local_rank/local_size describe this host.
struct LaunchInfo {
  int rank = -1;
  int size = 0;
  /// Rank among the ranks of this host. When the launcher does not say (WEFT_RANK without
  /// WEFT_LOCAL_RANK, PMI without MPI_LOCALRANKID) it is 0 and local_size is -1: callers that
  /// need the real values should derive them from the host ids exchanged at bootstrap.
  int local_rank = 0;
  /// Ranks on this host, or -1 when the launcher does not say.
  int local_size = -1;
  /// "weft" (WEFT_RANK/WEFT_SIZE), "mpirun" (Open MPI, or MPICH/Hydra through PMI_*) or
  /// "slurm".
  std::string launcher;
  /// WEFT_COORDINATOR as given (host:port), or empty; not validated here.
  std::string coordinator;
};

/// Largest job read_launch_info accepts; anything above is taken for a typo.
inline constexpr int kMaxLaunchSize = 1 << 20;

/// Reads the launch environment. Precedence, first source present wins:
///   1. WEFT_RANK + WEFT_SIZE (WEFT_LOCAL_RANK optional)
///   2. Open MPI: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}
///   3. Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; local size from
///      SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE ("4(x2),3"
///      lists per-node counts; SLURM_NODEID picks this node's entry when they differ)
///   4. MPICH/Hydra: PMI_RANK + PMI_SIZE (MPI_LOCALRANKID / MPI_LOCALNRANKS optional)
/// WEFT_LOCAL_RANK, when set, overrides the launcher's local rank.
/// Errors: InvalidArgument when a value is not a plain non-negative integer, a source sets
/// only one of rank/size, size is outside [1, kMaxLaunchSize] or rank >= size (the message
/// names the variable and its value); FailedPrecondition when no source is present.
absl::StatusOr<LaunchInfo> read_launch_info(const EnvLookup& lookup = read_env);

/// Whether, by the launcher's word, every rank of a communicator of `size` ranks runs on
/// this host: it started exactly `size` ranks, all here. `size` 0 (not known yet, as in
/// make_unique_id): it started several ranks, all here. A launch of one process per host
/// (srun -n1, or mpirun -np 1 on each node) says nothing about a communicator made across
/// such launches, and no launcher says nothing at all.
bool launcher_puts_every_rank_here(int size, const EnvLookup& lookup = read_env);

/// The interfaces tcp listens on (the bootstrap's rendezvous, the data links and shrink's
/// control plane): WEFT_SOCKET_IFNAME's when it is set; loopback alone when every rank of the
/// job shares this host, since nothing from another host is needed and nothing from another
/// host should reach a listener; else "" (transport/tcp/rails.hpp picks the default
/// interface).
std::string listen_ifname(const std::string& socket_ifname, bool every_rank_here);

}  // namespace weft
