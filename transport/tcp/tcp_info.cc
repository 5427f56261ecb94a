// Apart from pair.cc because linux/tcp.h and glibc's netinet/tcp.h both define struct
// tcp_info, and only the kernel's has the fields past tcpi_total_retrans (bytes_acked since
// Linux 4.1, segs_out since 4.2, bytes_sent, bytes_retrans and dsack_dups since 4.19).
#include "transport/tcp/tcp_info.hpp"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace weft::transport::tcp {

bool read_socket_path_info(int fd, SocketPathInfo* out) {
  struct tcp_info info;
  std::memset(&info, 0, sizeof info);
  socklen_t len = sizeof info;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  // An older kernel returns a shorter struct: the fields it lacks stay zero.
  out->retransmits = info.tcpi_total_retrans;
  out->dsack_dups = info.tcpi_dsack_dups;
  out->lost = info.tcpi_lost;
  out->rtt_us = info.tcpi_rtt;
  out->rttvar_us = info.tcpi_rttvar;
  out->bytes_acked = info.tcpi_bytes_acked;
  out->bytes_sent = info.tcpi_bytes_sent;
  out->bytes_retrans = info.tcpi_bytes_retrans;
  out->segments_sent = info.tcpi_segs_out;
  return true;
}

}  // namespace weft::transport::tcp
