// One tcp link: one connected, non-blocking stream socket per rail the link runs over
// (rails.hpp). Sends go straight from the caller's memory to the kernel. Receives land in a
// staging buffer the pair allocates once (recv_some, for bytes the caller reduces), or
// straight in the caller's memory (recv_scatter, for bytes it only copies: one copy less),
// so nothing on the data path allocates or page-faults.
//
// Striping. With K sockets, the link's byte stream is cut by stream offset into chunks of
// kStripeBytes, and chunk c travels on socket c % K. Both ends know K (the handshake agrees
// on it) and count offsets the same way, so each socket stays an ordered stream, the
// receiver reassembles by reading the sockets in turn, and no byte of header is added. A
// message smaller than a chunk goes out in one send on one socket, as on a single-rail
// link (it takes two only where it straddles a chunk boundary). With K = 1 the pair runs
// the single-socket code it always ran.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/tcp/address.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

/// Bytes of the kernel send and receive buffers a link asks for, per socket.
inline constexpr int kSocketBufferBytes = 4 << 20;
/// Bytes of the per-pair staging buffer that recv_some reads into.
inline constexpr size_t kStagingBytes = 256 << 10;
/// Bytes of one stripe chunk. Large enough that the cost of moving to the next socket (one
/// more send and recv call, ~1-2 us each) stays a few percent of a chunk's wire time even at
/// 100 Gb/s (~40 us), and a multiple of kStagingBytes so a receive never splits a staging
/// read at a chunk end it could have avoided. Small enough that what the collectives keep in
/// flight on a link (up to the 4 MiB relay; ring steps move 1 MiB chunk rounds) spreads
/// over several rails, and that each socket's kernel buffer holds several chunks, so no
/// rail idles while the sender fills another. NCCL's socket transport likewise cuts each
/// message into per-socket pieces of at least 64 KiB.
inline constexpr size_t kStripeBytes = 512 << 10;
static_assert((kStripeBytes & (kStripeBytes - 1)) == 0, "offsets map to chunks by shifting");
static_assert(kStripeBytes % kStagingBytes == 0);

/// Sizes the kernel buffers of `fd` before it connects (or of a listener, whose accepted
/// sockets inherit them): kSocketBufferBytes when the kernel grants that much
/// (net.core.[rw]mem_max); otherwise the socket keeps the kernel's autotuning, which then
/// grows further than a clamped explicit size would.
void tune_socket_buffers(int fd);

/// Bytes one rail of a link has carried.
struct RailStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

class TcpPair : public Pair {
 public:
  /// Takes ownership of `fds` (1 to kMaxRails connected sockets, in rail order; both ends
  /// must hold the same count); `peer_address` is what the messages name.
  TcpPair(const std::vector<int>& fds, int self_rank, int peer_rank, std::string peer_address);
  ~TcpPair() override;
  TcpPair(const TcpPair&) = delete;
  TcpPair& operator=(const TcpPair&) = delete;

  int peer() const override { return peer_rank_; }
  absl::StatusOr<size_t> send_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> send_some_more(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> recv_some(size_t max, Sink sink) override;
  absl::StatusOr<size_t> recv_scatter(const Scatter& to, size_t max) override;
  absl::Status check_peer() override;
  PairStats stats() const override;
  /// TCP_INFO of every rail's socket (tcp_info.hpp), each named by its local interface.
  void read_path_counters(PathCounterSink sink) const override;

  /// How many sockets (rails) the link stripes over.
  size_t rails() const { return rails_; }
  /// What rail `rail` (< rails()) has carried; the health monitor will watch rails apart.
  RailStats rail_stats(size_t rail) const;

  /// Kernel buffer sizes the first socket actually got (as getsockopt reports them), for logs.
  int sndbuf_bytes() const;
  int rcvbuf_bytes() const;

 private:
  struct RailCounters {
    LinkCounter sent;
    LinkCounter received;
  };

  /// send_some with extra send(2) flags.
  absl::StatusOr<size_t> send_flagged(const std::byte* data, size_t len, int flags);
  absl::StatusOr<size_t> send_striped(const std::byte* data, size_t len);
  /// Up to `max` bytes, read to where `to` says when it is not null, else through the
  /// staging buffer into `*sink`; on a striped link from the socket of each chunk in turn.
  absl::StatusOr<size_t> receive(size_t max, const Scatter* to, const Sink* sink);
  /// The rail that carries the stream byte at `offset`.
  size_t rail_at(uint64_t offset) const { return (offset / kStripeBytes) % rails_; }
  /// Records the first fatal error; every later call returns it without touching a socket.
  absl::Status fail(absl::Status status);
  /// Records a failed send: later sends return it, receives go on until the stream ends.
  absl::Status fail_sending(absl::Status status);
  absl::Status errno_error(const char* op, int err, size_t rail);
  absl::Status closed_error(size_t rail) const;

  std::array<int, kMaxRails> fds_{};
  const size_t rails_;
  const int self_rank_;
  const int peer_rank_;
  const std::string peer_address_;
  std::unique_ptr<std::byte[]> staging_;
  absl::Status broken_;       // the link is lost both ways
  absl::Status send_broken_;  // a send failed; what the peer sent before may still be read
  // Stream offsets, used only by the thread that drives the link (striped links only).
  uint64_t send_offset_ = 0;
  uint64_t recv_offset_ = 0;
  // LinkCounters: the health monitor reads stats() from its own thread.
  LinkCounter bytes_sent_;
  LinkCounter bytes_received_;
  LinkCounter errors_;
  std::array<RailCounters, kMaxRails> rail_counters_;  ///< striped links only
  /// Names each rail by the local interface its socket leaves from (getifaddrs: a few
  /// system calls), on the health monitor's thread at its first reading rather than while a
  /// collective waits for the link to open.
  void name_rails() const;
  // Empty: none found. Written and read by the health monitor's thread alone.
  mutable std::array<std::string, kMaxRails> rail_ifnames_;
  mutable bool rails_named_ = false;
};

}  // namespace weft::transport::tcp
