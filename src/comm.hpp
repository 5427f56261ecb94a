// The communicator's runtime: transports, link graph, schedule, lazily opened links and the
// workspace; validates each call, picks its algorithm and runs it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/algorithm.hpp"
#include "collectives/direct_exchange.hpp"
#include "collectives/stream.hpp"
#include "src/base/env.hpp"
#include "src/base/job_secret.hpp"
#include "src/base/mutex.hpp"
#include "src/health/monitor.hpp"
#include "src/health/watch.hpp"
#include "src/inject_file.hpp"
#include "src/isolation.hpp"
#include "src/link_tender.hpp"
#include "src/route.hpp"
#include "src/route_history.hpp"
#include "src/engine.hpp"
#include "src/ipc_path.hpp"
#include "src/staging.hpp"
#include "src/topology.hpp"
#include "weft/weft.hpp"

namespace weft::detail {

/// Hands this rank's PeerInfo to every rank and returns all of them, indexed by rank.
using Exchange = std::function<absl::StatusOr<std::vector<PeerInfo>>(const PeerInfo& self)>;

class Comm : public LinkProvider, public LinkTending {
 public:
  /// Builds the communicator: transports listen, `exchange` meets the other ranks, the
  /// topology and the schedule are derived. `job_id` and `secret` must be the same on every
  /// rank; every connection proves the secret. `every_rank_here`: the caller knows that all
  /// ranks share this host, so tcp listens on loopback alone (listen_ifname).
  static absl::StatusOr<std::unique_ptr<Comm>> create(int rank, int size, uint64_t job_id,
                                                      const JobSecret& secret,
                                                      bool every_rank_here,
                                                      const Exchange& exchange);
  ~Comm() override;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const Topology& topology() const { return topology_; }
  const Config& config() const { return config_; }

  /// Validates, chooses the algorithm, agrees with the other ranks that they make the same
  /// call (collectives/call_check.hpp) and runs it. After a failure the communicator refuses
  /// further calls: links may hold a half-sent message. `args` is the caller's own, which
  /// the call completes (its deadline): taken by reference, since copying a struct the
  /// caller has just written field by field stalls on store forwarding (by value, 8-512 B
  /// calls over shm took 4-15% longer).
  absl::Status run(CollectiveArgs& args, const CallOptions& options);
  /// Runs `body` with the links as a call has them: the tender held off, waits on this
  /// thread tending every link. For what drives single links rather than a collective
  /// (weft diag probe); every rank must reach it, as a call, or its peers wait.
  absl::Status with_links(absl::FunctionRef<absl::Status(LinkProvider&)> body);

  absl::StatusOr<transport::Pair*> link(int peer, Deadline deadline) override;

  /// Thread-safe. Makes the collective in progress (if any) return Aborted within a wait
  /// step, and every later call FailedPrecondition; peers then fail fast too.
  void abort();
  /// Thread-safe. OK while the communicator works; the error that broke it otherwise.
  absl::Status async_error() const;
  std::vector<LinkStats> link_stats() const;
  /// The health monitor (src/health/), or null with WEFT_HEALTH=off. Thread-safe.
  health::Monitor* health() const { return watch_ ? watch_->monitor() : nullptr; }

  /// Agrees with the ranks still alive on who they are and builds their communicator
  /// (src/shrink.hpp); `dropped` gets the ranks left out. This communicator is unusable
  /// afterwards. A zero timeout means WEFT_TIMEOUT.
  absl::StatusOr<std::unique_ptr<Comm>> shrink(absl::Duration timeout, std::vector<int>* dropped);

  /// LinkTending, for the call's waits: every open link tends itself (the call's thread).
  bool tend_links() override;
  /// On the tender's thread, every kInjectEvery: applies WEFT_INJECT_FILE to the links.
  void apply_inject_file();

 private:
  // Holds `mu` for a call's life, or nothing for a null mu. The tender (tcp and ucx links) must
  // not touch the links while a call drives them; an shm-only communicator has none, and
  // skips the lock: at 8 bytes its call takes ~0.2 us.
  struct CallLock {
    CallMutex* mu;
    explicit CallLock(CallMutex* m) ABSL_NO_THREAD_SAFETY_ANALYSIS : mu(m) {
      if (mu != nullptr) mu->lock();
    }
    ~CallLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (mu != nullptr) mu->unlock();
    }
  };

  Comm(int rank, int size, Config config);
  absl::Status validate(const CollectiveArgs& args) const;
  /// The health watch's device sources, before the bootstrap (src/health/watch.hpp).
  absl::StatusOr<std::unique_ptr<health::Watch>> open_watch() const;
  /// Visits every peer with an open link or a failed connect, under links_mu_.
  void walk_links(absl::FunctionRef<void(const health::LinkView&)> visit) const;
  /// Whether a call moves device buffers (or is ordered on a stream, or the device is stood
  /// in for): it goes through staging_.
  bool on_device(const CollectiveArgs& args, const CallOptions& options) const;
  /// Whether a call on_device() returns at once, ordered on its stream by engine_.
  bool returns_at_once(const CollectiveArgs& args, const CallOptions& options) const;
  /// Lets the calls queued on streams finish (past WEFT_TIMEOUT, aborts them if `may_abort`)
  /// and stops engine_; staging_ is left to streams that have not copied out by then.
  void stop_engine(bool may_abort);
  /// Pins the staging buffers at the first call on device buffers; an error where no GPU
  /// can be used (and the device is not stood in for).
  absl::Status open_staging(const char* what);
  /// A call on device buffers, piece by piece over the host path (src/staging.hpp), on this
  /// thread (standing in, with no stream).
  absl::Status run_staged(CollectiveArgs& args, const CallOptions& options);
  /// A call ordered on a stream: its stream's side queued, its pieces queued for engine_;
  /// returns at once.
  absl::Status submit(const CollectiveArgs& args, const CallOptions& options);
  /// engine_'s side of a call submit() queued, its pieces numbered from `first`.
  absl::Status run_queued(CollectiveArgs& args, const CallOptions& options, uint32_t first);
  /// At the first call ordered on a stream, with nothing queued: where every rank is on this
  /// host and WEFT_CUDA_IPC is on, shares this rank's window, maps every peer's (one host
  /// allgather of addresses) and agrees with every rank that all could (one host allreduce):
  /// then ipc_ is made. Otherwise, or where any rank could not, calls stage.
  absl::Status open_ipc();
  /// A call ordered on a stream in a communicator of one rank: nothing crosses a link, so
  /// the stream copies the input to the output (where they are apart) and moves the words
  /// past call number `piece` itself, and engine_ has nothing to run.
  absl::Status queue_local(void* stream, const CollectiveArgs& args, uint32_t piece);
  /// engine_'s side of a call queued on ipc_.
  absl::Status run_ipc(CollectiveArgs& args, const CallOptions& options, const Engine::Plan& plan);
  /// Whether device call number `call` (counted from 1 on every rank alike) takes ipc_: not
  /// once a link is isolated (src/isolation.hpp), from the call it applies to (ipc_switches_).
  bool ipc_in_use(uint32_t call);
  /// After a route change: where it isolated a link, or restored the last, calls on streams
  /// switch path from the call every rank is sure to have seen it by (ipc_switches_).
  void switch_ipc_path();
  /// What run_staged and run_queued share: the call's deadline, and each piece run as a
  /// host call within what is left of it.
  absl::Status run_pieces(
      CollectiveArgs& args, const CallOptions& options,
      absl::FunctionRef<absl::Status(absl::FunctionRef<absl::Status(CollectiveArgs&)>)> pieces);
  /// Before a call not ordered on a stream: every call queued on engine_ runs first, so that
  /// every rank makes its calls in one order (and, with `copied_out`, their streams have
  /// copied their results out of the staging buffers). An error if one failed.
  absl::Status settle(bool copied_out);
  /// A call on host buffers: the algorithm's choice, then run_with.
  absl::Status run_host(CollectiveArgs& args, const CallOptions& options);
  /// run() once the algorithm is chosen; `index`: its place in all_algorithms().
  absl::Status run_with(const Algorithm& chosen, uint8_t index, CollectiveArgs& args,
                        const CallOptions& options);
  /// Tells every link the call used that it ended (Pair::call_ends): what was lent to them
  /// may change from now on.
  void end_call_on_links();
  /// Every rank adopted `change` in this call: the route's next epoch.
  void adopt(const RouteChange& change);
  /// Tells the link to `peer` which rails it may stripe over (route_'s isolated rails).
  void use_rails(int peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(links_mu_);
  /// Sends the link to `peer`, if open, through a third rank (`on`) or back (Pair::detour).
  /// Any thread.
  void detour(int peer, bool on);
  /// Records `s` as what broke this communicator and closes every link.
  void fail(const absl::Status& s);
  /// After fail(s): asks every rank whether it is alive and returns `s` with the rank at
  /// fault named (src/blame.hpp), recorded as what broke this communicator.
  absl::Status blamed(const absl::Status& s);

  int rank_;
  int size_;
  Config config_;
  std::vector<std::string> forced_algorithm_;  // per CollectiveKind, from WEFT_ALGORITHM
  struct LastChoice {
    size_t bytes = 0;
    const Algorithm* algorithm = nullptr;  // null: nothing chosen yet
    uint8_t index = 0;                     // in all_algorithms(), for the call check
  };
  LastChoice last_choice_[kNumCollectiveKinds];  // run()'s, without a per-call name
  int64_t timeout_ns_ = 0;                       // config_.timeout, as every call needs it
  uint64_t job_id_ = 0;
  JobSecret secret_{};
  std::vector<std::unique_ptr<transport::Transport>> transports_;  // by preference
  // What this rank concluded about the last fault (src/blame.hpp), which control_'s listener
  // tells whoever asks; declared first so that it outlives that listener's thread.
  std::atomic<uint64_t> blame_{0};
  transport::TransportInit control_init_;          // control_'s, for the liveness queries
  std::unique_ptr<transport::Transport> control_;  // shrink's own tcp listener
  Topology topology_;
  bool shm_only_ = false;  // every link is over shm (algorithm choice)
  bool gpu_shared_ = false;  // another rank shares this process, so its CUDA context
  bool every_rank_here_ = false;  // as create() was told; a shrunk communicator inherits it
  Route route_;  // the ring and the links in use, this epoch
  RouteHistory route_history_;  // route_ for other threads (GET /route), with its changes
  std::vector<std::string> rail_ifnames_;  // tcp rails by number (WEFT_SOCKET_IFNAME)
  // By peer rank; null until used. The collective's thread alone sets and resets them, and
  // does so under links_mu_; other threads (link_stats) read them under it too, so the
  // collective's own reads on the data path need no lock.
  mutable Mutex links_mu_;
  std::vector<std::unique_ptr<transport::Pair>> links_;
  // Connects to each peer that failed, by peer rank (the health monitor reads them).
  std::unique_ptr<transport::LinkCounter[]> failed_connects_;
  // The peers whose links the call under way used, once each (end_call_on_links).
  std::vector<uint8_t> used_;  // by peer rank
  std::vector<int> used_peers_;  // capacity size_, reserved once
  std::unique_ptr<std::byte[]> relay_;
  size_t relay_bytes_ = 0;
  std::unique_ptr<Staging> staging_;  // made at the first call on device buffers
  // The cuda_ipc path (src/ipc_path.hpp), made by open_ipc() where every rank could map every
  // window; it uses staging_'s copier, so it goes first. The copier may free this rank's
  // window while peers still read it: their mappings hold the memory (device/shared_fd.hpp).
  std::unique_ptr<IpcPath> ipc_;
  bool ipc_opened_ = false;
  absl::Status kernels_;  // whether the GPU kernels loaded (open_staging); cuda_ipc needs them
  // Calls ordered on streams: queued (the caller's thread, in the engine's turn) and run (the
  // engine's thread), counted alike on every rank.
  uint32_t device_calls_queued_ = 0;
  std::atomic<uint32_t> device_calls_run_{0};
  // A route change adopted while device call d ran decides the path of calls from
  // d + Engine::kMostQueued + 1 on: by then the caller is sure to have seen it, whereas calls
  // up to there may be queued already, on every rank with the path chosen before. Every rank
  // thus switches at the same call. Pairs (first call, whether ipc_ is in use), in order.
  Mutex ipc_mu_;
  std::vector<std::pair<uint32_t, bool>> ipc_switches_ ABSL_GUARDED_BY(ipc_mu_);
  // Runs the calls ordered on streams (made at the first); stopped first in ~Comm, before
  // anything its thread uses.
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<std::byte[]> stream_block_;  // kStreamBlockBytes, for AlgoContext
  std::unique_ptr<DirectExchange> direct_;      // for AlgoContext, its pages touched once
  mutable Mutex failure_mu_;
  absl::Status failure_ ABSL_GUARDED_BY(failure_mu_);
  std::atomic<bool> failed_{false};   // failure_ is set: read on every call, without the lock
  std::atomic<bool> aborted_{false};
  uint32_t calls_ = 0;  // collectives started: the call check's sequence number
  // WEFT_INJECT_FILE as last read (the tender's thread alone).
  std::vector<InjectedCorruption> injected_;
  int64_t inject_stamp_ = -1;      // the file's mtime and size when read, mixed
  absl::Time inject_next_ = absl::InfinitePast();
  // Held by every call; the tender looks after the links only while it is free.
  CallMutex calls_mu_;
  // Destroyed before links_: its thread tends them between calls (tcp and ucx links).
  std::unique_ptr<LinkTender> tender_;
  // What this rank proposes about its own links (null: WEFT_HEALTH or WEFT_ISOLATE off); fed
  // by the monitor's thread, so declared before watch_.
  std::unique_ptr<Isolation> isolation_;
  // Declared last, so destroyed first: its monitor thread walks links_ under links_mu_.
  std::unique_ptr<health::Watch> watch_;
};

}  // namespace weft::detail
