// The progress engine: a communicator's calls ordered on a caller's stream return at once,
// as NCCL's do, and run here, on a thread of the communicator's own, in the order they were
// made. So far only for the GPU's stand-in (a device::StandInStream): on a GPU the staged
// copies must first move onto the caller's stream (docs/ARCHITECTURE.md, "Device memory"). At the call the copier holds the stream (src/device/copier.hpp: a mark where the
// inputs are ready, then a wait on a number); the engine waits for the mark, runs the call
// (the staged pieces of src/staging.hpp), and releases the number, so the caller's later
// work sees the results. A call that fails here breaks the communicator (its async_error)
// and still releases its stream: no stream waits forever. Host calls settle() the engine
// first, so every rank still makes its calls in one order.
#pragma once

#include <array>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "collectives/collective.hpp"
#include "src/device/copier.hpp"
#include "weft/weft.hpp"

namespace weft {

class Engine {
 public:
  /// Runs one call to its end on the engine's thread: `ready(deadline)` returns once the
  /// call's inputs are ready on the caller's stream.
  using Run = std::function<absl::Status(CollectiveArgs& args, const CallOptions& options,
                                         absl::FunctionRef<absl::Status(Deadline)> ready)>;
  /// Calls queued at most: a caller with more waits for the oldest to finish.
  static constexpr size_t kMostQueued = 64;

  Engine(device::Copier& copier, Run run);
  /// Runs what is queued, each call within its own deadline, then stops.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Holds `options.stream` for the call and queues it; returns at once. An error (the
  /// stream cannot be held, or the queue stayed full until `deadline`) leaves nothing queued.
  absl::Status submit(const CollectiveArgs& args, const CallOptions& options, Deadline deadline);
  /// Returns once every call queued so far has finished; an error at the deadline.
  absl::Status settle(Deadline deadline);
  /// Whether a call is queued or running.
  bool busy() const;

 private:
  struct Call {
    CollectiveArgs args;
    CallOptions options;
    device::Ticket ticket;
  };
  void serve();

  device::Copier& copier_;
  Run run_;
  // Submitters take turns under submit_mu_: hold() may block (a CUDA stream whose queue is
  // full), and must not do so under mu_, which the engine needs to start the next call.
  std::mutex submit_mu_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  // A ring of calls, allocated once: [head_, tail_) are queued, head_'s may be running.
  std::array<Call, kMostQueued> calls_;
  size_t head_ = 0, tail_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: it starts once the rest is made
};

}  // namespace weft
