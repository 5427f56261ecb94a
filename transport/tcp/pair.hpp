// One tcp link: for each rail the link runs over, two connected, non-blocking sockets, each
// a Path (path.hpp): one carries data frames both ways (sockets [0, K)), the other
// acknowledgements and resend requests both ways ([K, 2K)). The sending half (outbound.hpp)
// frames, retains and stripes the stream; the receiving half (inbound.hpp) reassembles it
// and acknowledges. Data both ways on one socket lets each side's TCP acknowledgements ride
// on the other side's data, as before links were framed (a socket per direction cost small
// messages about a segment more a call); control on a socket of its own means an
// acknowledgement never waits behind data the caller is not reading yet.
//
// Striping. With K outbound paths alive, the stream is cut by offset into chunks of
// kStripeBytes from the start of the sender's epoch, and each chunk goes on the next path in
// turn; every frame header names the path of the next frame, so the receiver reads the
// sockets in turn. A message smaller than a chunk goes out in one frame on one socket.
//
// Surviving a path. A path dies on a socket error, a reset, a close, a frame out of step, or
// unacknowledged bytes older than TransportInit::path_timeout_ms (TCP_USER_TIMEOUT, with
// keepalive probing idle paths). The sender then resumes from the last acknowledged byte
// over the paths left, in a new epoch; the receiver skips what it already has. The link
// fails only when one direction has no path left, with an error naming every path tried.
//
// Starting without a path. A rail may be down when a link is made (a partition, a cable).
// Once one path of the link has both its sockets, the others get path_timeout_ms more; a
// path still incomplete then is lost from the start on both ends (its sockets are -1 here).
// Each end decides alone, and may count a path the other does not (the last proof crossed
// the deadline): the listener closes a socket that arrives for a link it already handed
// out, so the dialer sees that path fail and resumes without it, as for any path.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/tcp/address.hpp"
#include "transport/tcp/link_events.hpp"
#include "transport/tcp/path.hpp"
#include "transport/tcp/tcp_info.hpp"
#include "transport/tcp/relay.hpp"
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
/// flight on a link (up to its window, two chunks a rail: outbound.hpp) spreads over several
/// rails, and that each socket's kernel buffer holds several chunks, so no rail idles while
/// the sender fills another. NCCL's socket transport likewise cuts each
/// message into per-socket pieces of at least 64 KiB.
inline constexpr size_t kStripeBytes = 512 << 10;
static_assert((kStripeBytes & (kStripeBytes - 1)) == 0, "offsets map to chunks by shifting");
static_assert(kStripeBytes % kStagingBytes == 0);

// A link carries both ways at once (every ring step sends and receives), and a socket call
// holds the socket's lock while the kernel copies: short calls that alternate with the
// other direction keep both busy (pair.cc says more). They also keep one fast link from
// starving the other links a progress loop drives.
inline constexpr size_t kMaxSendPerCall = 128 << 10;
inline constexpr size_t kMaxRecvPerCall = kStagingBytes;

/// Sizes the kernel buffers of `fd` before it connects (or of a listener, whose accepted
/// sockets inherit them): kSocketBufferBytes when the kernel grants that much
/// (net.core.[rw]mem_max); otherwise the socket keeps the kernel's autotuning, which then
/// grows further than a clamped explicit size would.
void tune_socket_buffers(int fd);
/// Gives `fd` the path timeout (TransportInit::path_timeout_ms): TCP_USER_TIMEOUT, and
/// keepalive probes that find a partition on an idle path as soon.
void set_path_timeout(int fd, int timeout_ms);

/// Bytes one rail of a link has carried.
struct RailStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

/// Which paths of a link of `sockets` sockets (numbered as above) have both sockets, given
/// which sockets are there: bit k for path k.
uint32_t whole_paths(size_t sockets, absl::FunctionRef<bool(size_t)> has);

class Outbound;
class Inbound;

class TcpPair : public Pair {
 public:
  /// Takes ownership of `fds`: 2K connected sockets (K = 1 to kMaxRails rails: data sockets,
  /// then control sockets), numbered as both ends number them, -1 for both sockets of a path
  /// that did not connect (lost from the start); `peer_address` is what the messages name.
  /// `intake` (relay.hpp; null: none) brings paths added while the link lives: with one, a
  /// link whose every path timed out waits for such a path rather than failing.
  TcpPair(const std::vector<int>& fds, int self_rank, int peer_rank, std::string peer_address,
          const TransportInit& init, std::shared_ptr<PathIntake> intake = nullptr);
  ~TcpPair() override;
  TcpPair(const TcpPair&) = delete;
  TcpPair& operator=(const TcpPair&) = delete;

  int peer() const override { return peer_rank_; }
  absl::StatusOr<size_t> send_some(const std::byte* data, size_t len) override;
  absl::StatusOr<size_t> send_some_more(const std::byte* data, size_t len) override;
  /// Lent bytes of 64 KiB and more are kept where they lie until call_ends (outbound.hpp).
  absl::StatusOr<size_t> lend_some(const std::byte* data, size_t len) override;
  void call_received() override;
  void call_ends() override;
  absl::StatusOr<size_t> recv_some(size_t max, Sink sink) override;
  absl::StatusOr<size_t> recv_scatter(const Scatter& to, size_t max) override;
  absl::Status check_peer() override;
  PairStats stats() const override;
  std::vector<PathView> paths() const override;
  /// TCP_INFO of every path's socket (tcp_info.hpp), each named by its local interface and
  /// direction.
  void read_path_counters(PathCounterSink sink) const override;
  bool tend() override;
  void inject_corruption(double rate) override;
  void use_rail(std::string_view ifname, bool in_use, bool announce = true) override;
  std::vector<std::string> rail_names() const override;
  /// Asks the intake for a path through a third rank (only the dialer makes one) and, once
  /// there is one, carries the stream over it alone (Outbound::detour).
  void detour(bool on) override { detour_wanted_.store(on, std::memory_order_release); }

  /// For tests: every path dies as a partition kills it (timed out on this end, never closed
  /// by the peer). Cut both ends before either reads, or the peer sees them close.
  void inject_partition();

  /// How many rails the link stripes over (outbound paths it started with).
  size_t rails() const { return rails_; }
  /// What rail `rail` (< rails()) has carried of the stream, each way.
  RailStats rail_stats(size_t rail) const;

  /// Kernel buffer sizes the first socket actually got (as getsockopt reports them), for logs.
  int sndbuf_bytes() const;
  int rcvbuf_bytes() const;

 private:
  absl::StatusOr<size_t> send_flagged(const std::byte* data, size_t len, int flags,
                                      bool lent = false);
  absl::StatusOr<size_t> receive(size_t max, const Scatter* to, const Sink* sink);
  /// Names each path by the local interface its socket leaves from (getifaddrs: a few
  /// system calls), on the health monitor's thread at its first reading rather than while a
  /// collective waits for the link to open.
  void name_paths() const;
  /// Adopts a path the intake brought, and fails a link stranded past the relay wait (or at
  /// once when a peer closed its paths: it exited).
  void tend_added_paths();
  bool has_live_added_path() const;
  void adopt(PathIntake::NewPath fresh);
  /// How long a stranded link waits for a relay path.
  int relay_wait_ms() const { return 4 * path_timeout_ms_; }

  const size_t rails_;
  const int path_timeout_ms_;
  const int self_rank_;
  const int peer_rank_;
  LinkEvents events_;
  RidingAcks riding_acks_;
  std::vector<std::unique_ptr<Path>> paths_;  ///< [0, K): data; [K, 2K): control, by rail
  std::unique_ptr<Outbound> out_;
  std::unique_ptr<Inbound> in_;
  const std::shared_ptr<PathIntake> intake_;
  /// Paths added while the link lives, data then control socket of each. Other threads read
  /// the first added_count_ (stats, paths), so slots are filled before the count grows.
  std::array<std::unique_ptr<Path>, 2 * kMaxAddedPaths> added_;
  std::atomic<size_t> added_count_{0};
  absl::Time stranded_since_ = absl::InfinitePast();
  std::atomic<bool> detour_wanted_{false};  ///< as detour() asked, from any thread
  bool path_wanted_ = false;                ///< what this pair last told intake_->want()
  // Empty: none found. Written and read by the health monitor's thread alone.
  mutable std::vector<std::string> path_ifnames_;
  mutable bool paths_named_ = false;
  mutable std::vector<SocketTotals> rail_totals_;  ///< each rail's data socket, likewise
};

}  // namespace weft::transport::tcp
