#include "transport/shm/pair.hpp"

#include <signal.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace weft::transport::shm {

ShmPair::ShmPair(int peer, int32_t peer_pid, Ring inbound, Ring outbound)
    : peer_(peer), peer_pid_(peer_pid), inbound_(std::move(inbound)), outbound_(std::move(outbound)) {}

ShmPair::~ShmPair() {
  // Tell the peer, so its next wait fails at once instead of at its deadline.
  outbound_.header().state.fetch_or(RingHeader::kSenderClosed, std::memory_order_release);
  inbound_.header().state.fetch_or(RingHeader::kReceiverClosed, std::memory_order_release);
}

absl::Status ShmPair::peer_gone(const char* why) {
  ++stats_.errors;
  return absl::UnavailableError(absl::StrCat("shm link to rank ", peer_, " (pid ", peer_pid_,
                                             ") failed: ", why));
}

absl::StatusOr<size_t> ShmPair::send_some(const std::byte* data, size_t len) {
  const size_t n = outbound_.write(data, len);
  if (n == 0 && len > 0 &&
      (outbound_.header().state.load(std::memory_order_acquire) & RingHeader::kReceiverClosed)) {
    return peer_gone("the peer closed the link");
  }
  stats_.bytes_sent += n;
  return n;
}

absl::StatusOr<size_t> ShmPair::recv_some(size_t max, Sink sink) {
  const size_t n = inbound_.read(max, sink);
  // Data the peer wrote before closing is still delivered; only an empty, closed ring fails.
  if (n == 0 && max > 0 &&
      (inbound_.header().state.load(std::memory_order_acquire) & RingHeader::kSenderClosed) &&
      inbound_.readable() == 0) {
    return peer_gone("the peer closed the link");
  }
  stats_.bytes_received += n;
  return n;
}

absl::Status ShmPair::check_peer() {
  if (((inbound_.header().state.load(std::memory_order_acquire) & RingHeader::kSenderClosed) &&
       inbound_.readable() == 0) ||
      (outbound_.header().state.load(std::memory_order_acquire) & RingHeader::kReceiverClosed)) {
    return peer_gone("the peer closed the link");
  }
  // A process killed by a signal never sets the flags; ask the kernel whether it still exists.
  if (peer_pid_ > 0 && kill(peer_pid_, 0) != 0 && errno == ESRCH) {
    return peer_gone("the peer process exited");
  }
  return absl::OkStatus();
}

}  // namespace weft::transport::shm
