// weft's C++ API: a communicator over a group of ranks and the collectives it runs.
//
// Every call returns absl::Status. Errors are typed by their code:
//   InvalidArgument     bad input on this rank (null buffer, unknown type, overflow)
//   DeadlineExceeded    a wait ran past the call's timeout (a peer stopped, a link stalled)
//   Unavailable         a peer went away or a link failed
//   FailedPrecondition  the communicator is not usable (not initialised, already failed)
// and the message names the rank, the peer and what to do.
//
// Results and errors are those of the C API, whose header (weft/weft.h) states them in full:
// integer sum and prod wrap, integer avg divides the wrapped sum rounding toward zero, max and
// min propagate NaN; buffers may be the same (in place) but must not partly overlap; in-place
// reduce_scatter leaves the other blocks of `send` as they were. An InvalidArgument found on
// this rank leaves the communicator usable; a collective that fails (including ranks that
// disagree on the call) breaks it, and later calls return FailedPrecondition.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weft/export.h"
#include "weft/health.hpp"
#include "weft/types.hpp"

namespace weft {

/// Options shared by every collective. A zero timeout means "use WEFT_TIMEOUT"; an empty
/// algorithm means "choose by message size" (WEFT_ALGORITHM may still force one).
struct CallOptions {
  absl::Duration timeout = absl::ZeroDuration();
  std::string algorithm;
  /// A cudaStream_t. A call on buffers in device memory (found with cudaPointerGetAttributes)
  /// is ordered on it, as NCCL's are (null: the default stream): it returns at once, runs on
  /// the communicator's own thread once the work queued on the stream before it has, and the
  /// stream's later work waits for its results; a failure after it returned is async_error().
  /// Between ranks of one host the data goes GPU to GPU (cuda_ipc, WEFT_CUDA_IPC); otherwise
  /// it crosses the host path through pinned buffers, piece by piece (WEFT_STAGING_BYTES). The
  /// first such call sets the path up with every rank, so it returns once every rank has made
  /// it. Null with host buffers: the host path, no CUDA involved; such a call first waits
  /// until the calls queued on streams have run.
  void* stream = nullptr;
};

struct AllreduceOptions : CallOptions {
  ReduceOp op = ReduceOp::kSum;
};
struct AllgatherOptions : CallOptions {};
struct ReduceScatterOptions : CallOptions {
  ReduceOp op = ReduceOp::kSum;
};
struct BroadcastOptions : CallOptions {
  int root = 0;
};
struct BarrierOptions : CallOptions {};

struct ShrinkOptions {
  /// Zero: WEFT_TIMEOUT. Shrink takes at most twice this (see Communicator::shrink).
  absl::Duration timeout = absl::ZeroDuration();
};

/// Opaque token that lets ranks find each other: the rendezvous address and a job id.
/// Rank 0 (or any one process) creates it; the launcher or MPI hands it to every rank.
struct UniqueId {
  std::array<uint8_t, 128> bytes{};
};

/// Creates a UniqueId and starts serving the rendezvous for it in this process, on the
/// first interface WEFT_SOCKET_IFNAME names (default: the first non-loopback interface that
/// is up).
WEFT_API absl::StatusOr<UniqueId> make_unique_id();

/// One path of a link (tcp: a rail's pair of sockets), as the link sees it.
struct PathStats {
  std::string name;         ///< "path 0", ...
  uint64_t bytes_sent = 0;  ///< stream bytes this rank sent on it
  uint64_t bytes_received = 0;
  bool alive = true;
  std::string failure;      ///< why it died; empty while alive
};

/// Per-link counters, as the transports see them.
struct LinkStats {
  int peer = -1;
  std::string transport;  ///< "shm" or "tcp"; empty when the link was never used
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t errors = 0;
  // Faults the link survived (tcp; docs/LINKS.md): paths lost either way, resumptions on
  // another path and the bytes they sent again, frames whose CRC32C did not match.
  uint64_t path_failures = 0;
  uint64_t resumptions = 0;
  uint64_t bytes_resent = 0;
  uint64_t checksum_errors = 0;
  std::vector<PathStats> paths;  ///< tcp: each path; empty where a link has one fixed path
};

namespace detail {
class Comm;
}

/// A group of ranks that run collectives together. Not thread-safe: one thread drives a
/// communicator at a time, as with NCCL. Every rank must call the same collectives, in the
/// same order, with matching arguments.
class WEFT_API Communicator {
 public:
  /// Joins the job described by the launcher environment: mpirun (OMPI_COMM_WORLD_*), Slurm
  /// (SLURM_PROCID, ...) or WEFT_RANK / WEFT_SIZE, meeting the other ranks at
  /// WEFT_COORDINATOR (host:port; rank 0 serves it).
  static absl::StatusOr<std::unique_ptr<Communicator>> create_from_env();
  /// Joins the job identified by `id` as `rank` of `size` (the shape of ncclCommInitRank).
  static absl::StatusOr<std::unique_ptr<Communicator>> create(const UniqueId& id, int rank,
                                                              int size);
  /// Closes the links, after sending what they still owe their peers (the tail of the last
  /// call a slower rank may still be reading, acknowledgements): at most 10 seconds, none
  /// after a failure or abort().
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  /// Rank among the ranks of this host, and how many ranks share this host.
  int local_rank() const;
  int local_size() const;

  /// recv[i] = op over ranks of send[i], for i < count. send == recv is in-place.
  absl::Status allreduce(const void* send, void* recv, size_t count, DataType type,
                         const AllreduceOptions& options = {});
  /// recv[r * send_count + i] = send[i] of rank r. In-place when send == recv + rank * send_count.
  absl::Status allgather(const void* send, void* recv, size_t send_count, DataType type,
                         const AllgatherOptions& options = {});
  /// recv[i] = op over ranks of send[rank * recv_count + i]. In-place when
  /// recv == send + rank * recv_count.
  absl::Status reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type,
                              const ReduceScatterOptions& options = {});
  /// recv[i] = send[i] of the root; `send` is read on the root only. send == recv is in-place.
  absl::Status broadcast(const void* send, void* recv, size_t count, DataType type,
                         const BroadcastOptions& options = {});
  /// Returns once every rank has entered the barrier.
  absl::Status barrier(const BarrierOptions& options = {});

  /// Counters of every link this rank has opened.
  std::vector<LinkStats> link_stats() const;

  /// Thread-safe. The state of every link, rail, GPU, NVLink and InfiniBand port this rank
  /// watches, as the health monitor last judged it, with its counters (weft/health.hpp).
  /// Empty with WEFT_HEALTH=off. Link and rail scopes appear once the link is first used.
  std::vector<LinkHealth> health() const;
  /// Thread-safe. The oldest state change not yet taken, if any: poll it from any thread.
  /// The monitor keeps the latest 1024 changes; older ones are dropped when nobody polls.
  std::optional<HealthChange> next_health_change();

  /// Callable from any thread, like ncclCommAbort: the collective in progress on this rank
  /// (if any) returns Aborted within a wait step instead of at its deadline, and every
  /// later call fails; peers waiting on this rank over links already open fail within
  /// milliseconds once they close. Destroy the communicator afterwards.
  void abort();
  /// Callable from any thread, like ncclCommGetAsyncError: OK while the communicator works,
  /// else the error that broke it (Aborted after abort()).
  absl::Status async_error() const;

  /// After a rank died or hung: every surviving rank calls shrink and gets a communicator of
  /// the survivors, ranked in their old order, as with ncclCommShrink, except that weft finds
  /// the lost ranks itself (src/shrink.hpp): a rank is lost when it exited, or when it does
  /// not answer within the timeout (stopped, stuck, or not calling shrink). `dropped`, when
  /// given, gets the old ranks left out. This communicator refuses collectives afterwards;
  /// destroy it. Unavailable when this rank was left out or the agreement broke down (call
  /// shrink again). Returns within twice the timeout.
  absl::StatusOr<std::unique_ptr<Communicator>> shrink(std::vector<int>* dropped = nullptr,
                                                       const ShrinkOptions& options = {});

  /// For the runtime's own layers; not part of the stable API.
  detail::Comm& impl() { return *impl_; }

 private:
  explicit Communicator(std::unique_ptr<detail::Comm> impl);
  // The bodies of create and create_from_env, which keep exceptions inside the library.
  static absl::StatusOr<std::unique_ptr<Communicator>> create_unguarded(const UniqueId& id,
                                                                        int rank, int size);
  static absl::StatusOr<std::unique_ptr<Communicator>> create_from_env_unguarded();
  std::unique_ptr<detail::Comm> impl_;
};

}  // namespace weft
