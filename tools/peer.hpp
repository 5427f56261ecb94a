// A collective library that `weft bench` drives: weft itself, or the library it is compared
// with (`--compare mpi`; later `--compare nccl`). The bench fills, times and checks every
// library the same way; a Peer only makes the calls.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/device_mirror.hpp"
#include "tools/sweep.hpp"
#include "weft/weft.hpp"

namespace weft::tools {

class Peer {
 public:
  virtual ~Peer() = default;
  /// Short name for the table and the JSON: "weft", "mpi", "nccl".
  virtual const char* name() const = 0;
  /// Whether the library has this call's type (and op, for reductions); the bench prints
  /// "n/a" for calls it does not support.
  virtual bool supports(const Call& call) const = 0;
  /// Makes the call once. `at` is nccl-tests' layout (see place()); a library whose in-place
  /// convention differs maps it here, and says where the result went in result().
  virtual absl::Status run(const Call& call, const Placement& at) = 0;
  /// Where this rank's result lies after run().
  virtual std::byte* result(const Call& call, const Placement& at, int rank) const {
    return at.recv;
  }
  /// Returns once every call made so far has completed: a no-op for host libraries, whose
  /// calls are synchronous; a stream synchronize for a GPU library.
  virtual absl::Status finish() { return absl::OkStatus(); }
  /// Returns once no rank needs this one's help any more to complete the calls made so far,
  /// so that the bench can move on to another library; untimed. A no-op for weft, whose
  /// ranks return only once their part of a call is done. MPI progresses only inside MPI
  /// calls: a rank back from MPI_Allreduce may still owe a peer the rest of a message, and
  /// would never send it while it waits in weft's barrier for that very peer.
  virtual absl::Status settle() { return absl::OkStatus(); }
};

/// weft itself, over `comm` (which must outlive the peer); with a `mirror`, every call is
/// ordered on its stream (--memory device).
std::unique_ptr<Peer> make_weft_peer(Communicator& comm, DeviceMirror* mirror = nullptr);

/// weft over `comm` twice: `on` with its health monitor running, `off` with it paused, for
/// `--compare health-off` (the bench alternates their blocks of calls; each block's settle,
/// untimed, switches the monitor for the next). Fails when the monitor is off (WEFT_HEALTH=off).
struct HealthSwitchedPeers {
  std::unique_ptr<Peer> on;
  std::unique_ptr<Peer> off;
};
absl::StatusOr<HealthSwitchedPeers> make_health_switched_peers(Communicator& comm,
                                                              DeviceMirror* mirror = nullptr);

/// MPI over MPI_COMM_WORLD. Fails when this build has no MPI or the job did not start MPI.
absl::StatusOr<std::unique_ptr<Peer>> make_mpi_peer(bool mpi_initialized);

/// NCCL, on `mirror`'s device buffers and stream (both must outlive the peer), with a
/// communicator of its own over the ranks of `comm`. Collective: every rank gets the same
/// error where any cannot take part (no GPU, no NCCL, two ranks on one GPU).
absl::StatusOr<std::unique_ptr<Peer>> make_nccl_peer(Communicator& comm, DeviceMirror& mirror);
/// For `weft info`: the NCCL this process would load, or why none.
std::string describe_nccl();

}  // namespace weft::tools
