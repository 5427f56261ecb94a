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

}  // namespace weft::transport::tcp
