// One socket of a tcp link: either the one of a rail that carries data frames both ways, or
// the one beside it that carries acknowledgements and resend requests both ways (frame.hpp,
// pair.hpp). The two are twins: a rail is one path to its link, and when either socket
// fails (reset, error, stalled past its timeout, a frame out of step) both die, for good,
// and the link carries on over its other rails.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/base/mutex.hpp"
#include "transport/tcp/frame.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

/// Bytes a path reads ahead of a frame header, so that a frame's header and a small payload
/// arrive in one system call; larger payloads are read straight where they go. Whatever is
/// read ahead is copied once more: at 64 KiB that copy of a 32 KiB payload cost more than one
/// more recv, and every 512 KiB frame paid it for up to 64 KiB of the next one too.
inline constexpr size_t kInboxBytes = (4 << 10) + kFrameHeaderBytes;

class Path {
 public:
  Path() = default;
  Path(int fd, std::string name);
  ~Path();
  Path(const Path&) = delete;
  Path& operator=(const Path&) = delete;

  const std::string& name() const { return name_; }
  int fd() const { return fd_; }
  bool alive() const { return alive_; }
  const std::string& cause() const { return cause_; }
  /// Whether the path ended because the peer closed or reset it, as when its process exits;
  /// a partition only times paths out. A link whose paths all ended otherwise may be given
  /// a relay path (relay.hpp).
  bool peer_gone() const { return peer_closed_ || error_ == ECONNRESET || error_ == EPIPE; }
  /// For other threads (LinkStats): whether the path died, and why.
  bool dead_seen_elsewhere() const { return dead_.load(std::memory_order_acquire); }
  std::string failure_seen_elsewhere() const;

  /// Marks the path and its twin dead with `cause` and shuts their sockets both ways, so that
  /// the peer sees them end at once where the network still carries packets; a data twin
  /// lives on when the peer closed its control socket (path.cc says why). Idempotent.
  void kill(std::string cause);
  /// Makes `control` the twin of this data socket: the two sockets of a rail live and die
  /// together.
  void pair_with(Path* control) {
    twin_ = control;
    control->twin_ = this;
    control->is_control_ = true;
  }

  /// Reads into `parts` (first what was read ahead, then the socket). Returns the count,
  /// 0 when nothing is there yet, an error when the socket failed or the peer closed it.
  absl::StatusOr<size_t> read(const iovec* parts, int count);
  /// As read(), for parts that end where a frame ends: what the socket holds beyond them
  /// (the next frame's header, a small payload) is read ahead in the same system call.
  absl::StatusOr<size_t> read_to_frame_end(const iovec* parts, int count);
  absl::StatusOr<size_t> read(std::byte* dst, size_t len) {
    iovec part{dst, len};
    return read(&part, 1);
  }
  /// Reads one frame header once it is all there (reading ahead up to kInboxBytes); nullopt
  /// until then.
  absl::StatusOr<std::optional<Frame>> read_header();
  /// Whether the last read from the socket took all it had (returned short) and nothing read
  /// ahead is left: reading again at once would only find it empty.
  bool drained() const { return drained_ && inbox_begin_ == inbox_end_; }
  /// Sends from `parts` without blocking; the count, 0 when the socket is full.
  absl::StatusOr<size_t> write(const iovec* parts, int count, int flags = 0);

  /// What this path has carried, for the health monitor (LinkCounters: any thread reads).
  LinkCounter bytes_sent;
  LinkCounter bytes_received;
  LinkCounter failures;  ///< 0 or 1: the path died first of its twins
  /// Stream bytes (frame payloads, not headers) sent or handed over on this path.
  LinkCounter payload_sent;
  LinkCounter payload_received;

  /// A control frame being written (a resend request or acknowledgement that did not fit).
  std::byte control_out[kFrameHeaderBytes];
  size_t control_out_left = 0;

 private:
  absl::Status errno_status(const char* op, int err);
  absl::StatusOr<size_t> read_parts(const iovec* parts, int count, bool read_ahead);
  absl::Status peer_closed();

  int fd_ = -1;
  std::string name_;
  Path* twin_ = nullptr;
  bool alive_ = true;
  bool is_control_ = false;
  bool peer_closed_ = false;  ///< read the end of the peer's stream
  int error_ = 0;             ///< the errno a system call on the socket last failed with
  std::string cause_;
  // The same, for other threads: written once, when the path dies.
  std::atomic<bool> dead_{false};
  mutable Mutex failure_mu_;
  std::string failure_ ABSL_GUARDED_BY(failure_mu_);
  std::unique_ptr<std::byte[]> inbox_;  ///< kInboxBytes, touched when the path opens
  bool drained_ = false;
  size_t inbox_begin_ = 0;
  size_t inbox_end_ = 0;
};

}  // namespace weft::transport::tcp
