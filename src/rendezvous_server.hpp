// The server side of the TCP rendezvous (wire format in bootstrap.hpp): a thread in one
// process (the caller of make_unique_id, or rank 0 under WEFT_COORDINATOR) that serves a
// single rendezvous and ends.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/base/deadline.hpp"
#include "src/base/job_secret.hpp"
#include "src/unique_id.hpp"

namespace weft {

/// Serves one rendezvous of `size` ranks on a background thread. The thread ends once every
/// rank got the table, at the deadline, or when the server is stopped or destroyed; it never
/// outlives the deadline. Connections that do not speak the protocol are logged to stderr
/// and closed without counting; ranks that speak it but do not fit (another job, another
/// size, a duplicate rank) get an error reply naming what is wrong.
class RendezvousServer {
 public:
  /// Binds `bind_address` (port 0: a free port), listens and starts the thread. Ranks must
  /// prove `secret` (bootstrap.hpp). size 0: the first valid hello sets the size, and every
  /// later hello must agree.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> start(
      const RendezvousAddress& bind_address, uint64_t job_id, const JobSecret& secret, int size,
      Deadline deadline);
  /// As above, with the deadline WEFT_TIMEOUT from now.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> start(
      const RendezvousAddress& bind_address, uint64_t job_id, const JobSecret& secret, int size);

  /// Stops the thread (if still running) and joins it; returns promptly.
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  /// The address it listens on, with the port the kernel chose.
  const RendezvousAddress& address() const;
  /// True once the thread has ended.
  bool done() const;
  /// Waits for the thread to end (at the latest at the deadline) and returns how it ended:
  /// OK when every rank got the table; DeadlineExceeded naming the missing ranks; Cancelled
  /// after stop(); Unavailable when a rank vanished before its table was sent.
  absl::Status wait();
  /// Asks the thread to end now; ranks still waiting see their connection close.
  void stop();

 private:
  class Impl;
  explicit RendezvousServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
