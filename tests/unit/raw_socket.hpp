// A raw tcp client, as a stranger (or a test playing one) opens it on a weft listener: dial,
// read what comes back, see whether the listener closed it. Every wait is bounded.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "absl/time/time.h"
#include "src/base/deadline.hpp"
#include "transport/tcp/address.hpp"

namespace weft::transport::tcp {

/// A connected blocking socket to `to`, or -1.
inline int dial_raw(const SockAddr& to) {
  const int fd = ::socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, to.get(), to.len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// As above, to an address as weft formats it ("host:port"); -1 when it does not parse.
inline int dial_raw(const std::string& address) {
  auto to = parse_address(address);
  return to.ok() ? dial_raw(*to) : -1;
}

/// Up to `n` bytes from `fd` within `timeout`; fewer when the other end closes.
inline std::string read_raw(int fd, size_t n, absl::Duration timeout) {
  const Deadline deadline = Deadline::after(timeout);
  std::string out;
  char buf[256];
  while (out.size() < n && !deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, deadline.remaining_ms()) <= 0) continue;
    const ssize_t got = ::recv(fd, buf, std::min(sizeof buf, n - out.size()), MSG_DONTWAIT);
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

/// Whether the other end closed `fd` within `timeout` (EOF or reset; data is skipped).
inline bool closed_within(int fd, absl::Duration timeout) {
  const Deadline deadline = Deadline::after(timeout);
  char buf[256];
  for (int i = 0; i < 1000 && !deadline.expired(); ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, deadline.remaining_ms()) <= 0) continue;
    if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) return true;
  }
  return false;
}

}  // namespace weft::transport::tcp
