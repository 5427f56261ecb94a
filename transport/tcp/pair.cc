#include "transport/tcp/pair.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft::transport::tcp {
namespace {

// One recv_some call reads at most this much, so a fast link cannot starve the other links
// a progress loop drives.
constexpr size_t kMaxRecvPerCall = 4 * kStagingBytes;

int get_int_option(int fd, int level, int name) {
  int value = 0;
  socklen_t len = sizeof value;
  if (getsockopt(fd, level, name, &value, &len) != 0) return -1;
  return value;
}

// Whether the kernel lets an unprivileged socket have kSocketBufferBytes both ways. Linux
// reports twice the size it was asked for (the rest is bookkeeping), so a full grant reads
// back as at least the request. Probed once on a throwaway socket, because setting the size
// on a real socket switches its autotuning off for good.
bool kernel_grants_buffers() {
  static const bool granted = [] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const int want = kSocketBufferBytes;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
    const bool ok = get_int_option(fd, SOL_SOCKET, SO_SNDBUF) >= want &&
                    get_int_option(fd, SOL_SOCKET, SO_RCVBUF) >= want;
    ::close(fd);
    return ok;
  }();
  return granted;
}

}  // namespace

void tune_socket_buffers(int fd) {
  if (!kernel_grants_buffers()) return;
  const int want = kSocketBufferBytes;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
}

TcpPair::TcpPair(int fd, int self_rank, int peer_rank, std::string peer_address)
    : fd_(fd),
      self_rank_(self_rank),
      peer_rank_(peer_rank),
      peer_address_(std::move(peer_address)),
      staging_(new std::byte[kStagingBytes]) {
  // Touch every page now so the first receives do not fault them in.
  std::memset(staging_.get(), 0, kStagingBytes);
  const int flags = fcntl(fd_, F_GETFL, 0);
  if (flags >= 0) fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  // Collectives send small latency-bound messages; Nagle would hold them back.
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpPair::~TcpPair() {
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
}

absl::StatusOr<size_t> TcpPair::send_some(const std::byte* data, size_t len) {
  if (!broken_.ok()) return broken_;
  if (len == 0) return size_t{0};
  const ssize_t n = ::send(fd_, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n >= 0) {
    bytes_sent_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    return static_cast<size_t>(n);
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return size_t{0};
  return fail(errno_error("send", errno));
}

absl::StatusOr<size_t> TcpPair::recv_some(size_t max, Sink sink) {
  if (!broken_.ok()) return broken_;
  max = std::min(max, kMaxRecvPerCall);
  size_t handed = 0;
  while (handed < max) {
    const size_t want = std::min(max - handed, kStagingBytes);
    const ssize_t n = ::recv(fd_, staging_.get(), want, MSG_DONTWAIT);
    if (n > 0) {
      sink(staging_.get(), static_cast<size_t>(n));
      handed += static_cast<size_t>(n);
      bytes_received_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      if (static_cast<size_t>(n) < want) break;  // drained what the kernel had
      continue;
    }
    // Bytes already handed over are reported first; the error shows on the next call.
    if (handed > 0) break;
    if (n == 0) {
      return fail(absl::UnavailableError(absl::StrCat(
          "tcp: peer rank ", peer_rank_, " closed the connection to rank ", self_rank_,
          " (link to ", peer_address_, "); rank ", peer_rank_,
          " has probably exited or crashed: check its log")));
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
    return fail(errno_error("recv", errno));
  }
  return handed;
}

absl::Status TcpPair::check_peer() {
  if (!broken_.ok()) return broken_;
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return absl::OkStatus();
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
    const int err = get_int_option(fd_, SOL_SOCKET, SO_ERROR);
    return fail(errno_error("poll", err > 0 ? err : ECONNRESET));
  }
  // The peer shut its side. Unread bytes it sent before that still belong to the caller;
  // only an empty receive queue means nothing more will ever come.
  int unread = 0;
  if ((p.revents & POLLRDHUP) != 0 && ::ioctl(fd_, FIONREAD, &unread) == 0 && unread == 0) {
    return fail(absl::UnavailableError(absl::StrCat(
        "tcp: peer rank ", peer_rank_, " closed the connection to rank ", self_rank_,
        " (link to ", peer_address_, "); rank ", peer_rank_,
        " has probably exited or crashed: check its log")));
  }
  return absl::OkStatus();
}

PairStats TcpPair::stats() const {
  PairStats s;
  s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  return s;
}

int TcpPair::sndbuf_bytes() const { return get_int_option(fd_, SOL_SOCKET, SO_SNDBUF); }
int TcpPair::rcvbuf_bytes() const { return get_int_option(fd_, SOL_SOCKET, SO_RCVBUF); }

absl::Status TcpPair::fail(absl::Status status) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  broken_ = std::move(status);
  return broken_;
}

absl::Status TcpPair::errno_error(const char* op, int err) {
  return absl::UnavailableError(absl::StrCat(
      "tcp: rank ", self_rank_, " lost its link to peer rank ", peer_rank_, " at ",
      peer_address_, ": ", op, ": ", std::strerror(err), "; rank ", peer_rank_,
      " has probably exited or crashed (check its log), or the network between them failed"));
}

}  // namespace weft::transport::tcp
