// What the kernel knows about one tcp socket's path (TCP_INFO): retransmissions, losses and
// round-trip times, the first signs of a lossy or congested link. The health monitor reads
// it from its own thread; getsockopt(TCP_INFO) takes the socket's lock briefly and is safe
// while another thread sends on the same socket.
#pragma once

#include <cstdint>

namespace weft::transport::tcp {

struct SocketPathInfo {
  uint64_t retransmits = 0;     ///< segments retransmitted over the socket's life
  /// of those, the peer reported this many as duplicates (D-SACK): spurious retransmissions
  /// after reordering or an early timer, not loss (Linux 4.19+)
  uint64_t dsack_dups = 0;
  uint64_t lost = 0;            ///< segments presumed lost now (a level, not a total)
  uint64_t rtt_us = 0;          ///< smoothed round-trip time
  uint64_t rttvar_us = 0;       ///< its variation
  uint64_t bytes_sent = 0;      ///< bytes handed to the wire, retransmissions included
  uint64_t bytes_acked = 0;     ///< bytes the peer acknowledged
  uint64_t bytes_retrans = 0;   ///< bytes retransmitted
  uint64_t segments_sent = 0;   ///< segments sent, retransmissions included
};

/// Reads `fd`'s TCP_INFO; false when the kernel refuses (not a tcp socket, closed).
bool read_socket_path_info(int fd, SocketPathInfo* out);

/// The kernel keeps segments sent, retransmissions and D-SACKs in 32 bits (tcpi_segs_out
/// wraps in about 80 minutes at 10 Gb/s). A monitor that took the wrap for a reset would start
/// that counter over while a ratio's other counter kept its history. Fed each reading of one
/// socket in order, this carries them on in 64 bits.
class SocketTotals {
 public:
  void widen(SocketPathInfo* info) {
    info->retransmits = retransmits_.add(info->retransmits);
    info->dsack_dups = dsack_dups_.add(info->dsack_dups);
    info->segments_sent = segments_sent_.add(info->segments_sent);
  }

 private:
  struct Wide {
    uint64_t total = 0;
    uint32_t last = 0;
    uint64_t add(uint64_t raw) {
      const auto now = static_cast<uint32_t>(raw);
      total += static_cast<uint32_t>(now - last);  // modulo 2^32: across a wrap too
      last = now;
      return total;
    }
  };
  Wide retransmits_, dsack_dups_, segments_sent_;
};

}  // namespace weft::transport::tcp
