// One tcp link: a connected, non-blocking stream socket. Sends go straight from the
// caller's memory to the kernel; receives land in a staging buffer the pair allocates once,
// so nothing on the data path allocates or page-faults.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

/// Bytes of the kernel send and receive buffers a link asks for.
inline constexpr int kSocketBufferBytes = 4 << 20;
/// Bytes of the per-pair staging buffer that recv_some reads into.
inline constexpr size_t kStagingBytes = 256 << 10;

/// Sizes the kernel buffers of `fd` before it connects (or of a listener, whose accepted
/// sockets inherit them): kSocketBufferBytes when the kernel grants that much
/// (net.core.[rw]mem_max); otherwise the socket keeps the kernel's autotuning, which then
/// grows further than a clamped explicit size would.
void tune_socket_buffers(int fd);

class TcpPair : public Pair {
 public:
  /// Takes ownership of `fd`, a connected socket; `peer_address` is what the messages name.
  TcpPair(int fd, int self_rank, int peer_rank, std::string peer_address);
  ~TcpPair() override;
  TcpPair(const TcpPair&) = delete;
  TcpPair& operator=(const TcpPair&) = delete;

  int peer() const override { return peer_rank_; }
  absl::StatusOr<size_t> send_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> recv_some(size_t max, Sink sink) override;
  absl::Status check_peer() override;
  PairStats stats() const override;

  /// Kernel buffer sizes this socket actually got (as getsockopt reports them), for logs.
  int sndbuf_bytes() const;
  int rcvbuf_bytes() const;

 private:
  /// Records the first fatal error; every later call returns it without touching the socket.
  absl::Status fail(absl::Status status);
  absl::Status errno_error(const char* op, int err);

  const int fd_;
  const int self_rank_;
  const int peer_rank_;
  const std::string peer_address_;
  std::unique_ptr<std::byte[]> staging_;
  absl::Status broken_;
  // Atomic because the health monitor reads stats() from its own thread.
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> errors_{0};
};

}  // namespace weft::transport::tcp
