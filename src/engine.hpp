// The progress engine: a communicator's calls on device buffers return at once, ordered on
// the caller's stream as NCCL's are, and their host collectives run here, on a thread of the
// communicator's own, in the order the calls were made. At the call the caller's thread
// queues the stream's side (src/staging.hpp, Staging::queue_on: copies in and out of the
// pinned buffers, between writes and waits of words the engine shares with the stream); the
// engine runs each piece once the stream has copied it in, and says so, so the stream copies
// the results out and goes on. Pieces are numbered across calls. A call that fails here
// breaks the communicator (its async_error) and still lets its stream go on, as do the calls
// queued behind it: no stream waits forever. Calls on host buffers settle() the engine first,
// so every rank still makes its calls in one order.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "collectives/collective.hpp"
#include "src/device/copier.hpp"
#include "weft/weft.hpp"

namespace weft {

class Engine {
 public:
  /// How a call runs, as Queue chose: its pieces (at least one), numbered from `first`, and
  /// the path they take (Queue's to name and Run's to follow: the staging buffers or the
  /// cuda_ipc windows).
  struct Plan {
    uint32_t first = 0;
    uint32_t pieces = 1;
    int path = 0;
  };
  /// On the caller's thread: fills in the plan's pieces and path (`first` is set), then
  /// queues the stream's side of the pieces.
  using Queue = std::function<absl::Status(const CollectiveArgs& args, const CallOptions& options,
                                           Plan& plan)>;
  /// On the engine's thread: runs the call's pieces (Staging::run_queued), or, when
  /// `queued` is an error (its stream's side failed to queue), breaks the communicator.
  using Run = std::function<absl::Status(CollectiveArgs& args, const CallOptions& options,
                                         const Plan& plan, const absl::Status& queued)>;
  /// Calls queued at most: a caller with more waits for the oldest to finish.
  static constexpr size_t kMostQueued = 64;

  Engine(device::Copier& copier, Queue queue, Run run);
  /// Runs what is queued, each call within its own deadline, then stops.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues the call and returns at once; an error if the queue stayed full until
  /// `deadline`, or if the stream's side could not be queued: the engine then breaks the
  /// communicator in its turn (lets that stream go on past the call) and takes no more calls,
  /// as part of that side may be queued.
  absl::Status submit(const CollectiveArgs& args, const CallOptions& options, Deadline deadline);
  /// Returns once every call queued so far has run its pieces, and, with `copied_out`, once
  /// their streams have copied every result out (the staging buffers are free); an error at
  /// the deadline.
  absl::Status settle(Deadline deadline, bool copied_out);

 private:
  struct Call {
    CollectiveArgs args;
    CallOptions options;
    Plan plan;
    absl::Status queued;  ///< an error: the stream's side failed to queue
  };
  void serve();

  device::Copier& copier_;
  Queue queue_;
  Run run_;
  // Submitters take turns under submit_mu_: queueing on a CUDA stream may block (its queue
  // full), and must not do so under mu_, which the engine needs to start the next call.
  std::mutex submit_mu_;
  uint32_t next_ = 1;  // the next piece's number (under submit_mu_); the words start at 0
  absl::Status broken_;  // a stream's side failed to queue (under submit_mu_)
  mutable std::mutex mu_;
  std::condition_variable changed_;
  // A ring of calls, allocated once: [head_, tail_) are queued, head_'s may be running.
  std::array<Call, kMostQueued> calls_;
  size_t head_ = 0, tail_ = 0;
  uint32_t last_ = 0;  // the last piece queued (under mu_)
  bool broken_call_ = false;  // a call's stream side failed to queue (under mu_)
  bool stop_ = false;
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace weft
