// One UCP context and worker per communicator, shared by the ucx transport and its links.
//
// UCX's own settings (UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_THRESH, ...) come from the
// environment as UCX reads them; weft adds only what the user left unset: the rails
// WEFT_SOCKET_IFNAME names become UCX_NET_DEVICES, so a rail weft may not use is one UCX
// does not use either. Links of one communicator are driven one thread at a time, and the
// worker's own thread progresses it only between calls; Worker::Hold keeps the two apart,
// so UCX runs the worker serialized, without locks of its own. UCX calls the links' error
// handlers from whichever of the two progresses the worker.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "src/base/deadline.hpp"

namespace weft::transport::ucx {

/// What the UCX weft runs on can do, for `weft info` and `weft diag topo`.
struct UcxInfo {
  std::string version;                    ///< "1.13.1"
  std::vector<std::string> memory_types;  ///< "host", "cuda", ... as UCX names them
  bool device_memory = false;             ///< whether UCX moves CUDA memory itself
};

/// A link that holds bytes back (UcxPair::send_some_more) and sends them when asked.
class HoldsBytes {
 public:
  virtual void send_held_bytes() = 0;

 protected:
  ~HoldsBytes() = default;
};

/// An endpoint's failure as UCX reports it, to the error handler given the endpoint. The
/// worker keeps it, not the link: UCX may still call the handler of an endpoint whose close
/// did not finish while its link closed (a flush the peer never answers), after the link is
/// gone (UndefinedBehaviorSanitizer caught a handler writing into a destroyed link).
struct EndpointFailure {
  std::atomic<int> status{UCS_OK};  ///< the first error UCX reported, UCS_OK while none
  static void on_error(void* self, ucp_ep_h ep, ucs_status_t status);
};

class Worker {
 public:
  /// `net_devices`: UCX_NET_DEVICES for this context when the user set none ("": UCX's
  /// default); `peers`: how many endpoints it expects.
  static absl::StatusOr<std::shared_ptr<Worker>> create(const std::string& net_devices, int peers);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Holds the worker for one link operation. UCX runs the worker serialized (its thread
  /// mode SERIALIZED, no lock of its own): a link takes this once per operation instead of
  /// UCX taking its lock in each of the operation's several UCX calls, and the worker's
  /// own thread takes it only to progress between calls.
  class Hold {
   public:
    explicit Hold(Worker& w) : w_(w) {
      // A spin lock: held for one link operation, or by the worker's thread for one bounded
      // round of progress, and nearly never contended (absl::Mutex cost a 2-rank 8-byte
      // allreduce a fifth of its time here).
      while (w_.held_.exchange(true, std::memory_order_acquire)) {
        while (w_.held_.load(std::memory_order_relaxed)) spin_pause();
      }
    }
    ~Hold() { w_.held_.store(false, std::memory_order_release); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    Worker& w_;
  };

  /// A link holding bytes back; the worker's thread sends them (send_held_bytes) once no
  /// call has driven the worker for one of its naps (at most 2 kLongestNapMs after the last
  /// call), or the link tender does first, so held bytes leave when nothing follows them.
  /// Both with the worker held; `holding(nullptr)` is not allowed.
  void holding(HoldsBytes* link) { holding_.push_back(link); }
  void not_holding(HoldsBytes* link) { std::erase(holding_, link); }

  /// A place for a new endpoint's failure, kept until the worker goes; with the worker held.
  EndpointFailure* endpoint_failure() { return &endpoint_failures_.emplace_back(); }

  ucp_worker_h get() const { return worker_; }
  ucp_context_h context() const { return context_; }
  /// The worker's address: what peers create endpoints to (binary, published in bootstrap).
  const std::string& address() const { return address_; }
  /// Runs UCX's progress a bounded number of times, until it reports nothing more to do,
  /// from a call on the data path (which keeps the worker's own thread asleep).
  void progress();
  /// As progress(), for a link's tend(), which the link tender calls between calls: not
  /// counted as a call, so the worker's thread still takes over (the tender looks every
  /// 10 ms, which would hold it off for good once its naps reach kLongestNapMs).
  void progress_between_calls();
  /// One round of UCX's progress from a call; returns whether anything happened.
  bool progress_once();
  /// Never progresses UCX again, from any thread: a receive UCX had begun could not be ended
  /// (UcxPair::abandon), and its bytes would land, at the worker's next progress, in a buffer
  /// that is no longer its own. The communicator's links all fail with it.
  void stop_progress() { stopped_.store(true, std::memory_order_release); }
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  const UcxInfo& info() const { return info_; }
  /// Receives a probed `message` into `into` (up to `len` bytes: a longer one is cut short)
  /// and forgets it; a rendezvous not done by `deadline` stops the worker (stop_progress),
  /// since `into` may go.
  void drop(ucp_tag_message_h message, std::byte* into, size_t len, Deadline deadline);

 private:
  Worker() = default;
  void serve();  // the worker's own thread
  // While calls drive the worker, its thread looks whether they still do, first after a
  // millisecond and then after twice as long each time, up to this. Each look wakes the
  // thread on the core the calls run on (ranks are bound to one each) and takes it from them:
  // a look each millisecond made 2-rank 1-16 MiB allgathers and allreduces over ucx 3-12%
  // slower, the calls preempted a thousand times a second.
  static constexpr int kLongestNapMs = 16;
  void note_driven();
  // Receives and drops what nobody read, up to the first message larger than kDropUpTo,
  // before the worker goes: UCX warns of every message still queued then.
  void drop_unread();
  static constexpr size_t kDropUpTo = 1024;  // below any rendezvous threshold UCX sets

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::atomic<bool> held_{false};  // Hold
  std::atomic<bool> stopped_{false};  // stop_progress
  int wakeup_fd_ = -1;  // UCX's event fd
  int stop_fd_ = -1;    // an eventfd that stops the thread
  std::atomic<uint64_t> driven_{0};  // how many times calls progressed the worker
  std::vector<HoldsBytes*> holding_;  // with the worker held
  std::deque<EndpointFailure> endpoint_failures_;  // with the worker held; never moved
  std::thread thread_;
  std::string address_;
  UcxInfo info_;
};

/// The UCX library's description, from a context made for the purpose.
absl::StatusOr<UcxInfo> describe_ucx();

/// The error UCX's `status` means, as weft reports it: "<what>: <UCX's words>".
absl::Status ucx_error(ucs_status_t status, std::string_view what);

}  // namespace weft::transport::ucx
