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
#include "transport/tcp/rails.hpp"
#include "transport/tcp/tcp_info.hpp"

namespace weft::transport::tcp {
namespace {

// A link carries both ways at once (every ring step sends and receives), and a socket call
// holds the socket's lock while the kernel copies: packets the peer sends meanwhile wait in
// the socket's backlog, and a receive queue left unread closes the peer's window. One long
// send (a whole 128 MiB segment) thus runs the link half duplex. Short calls that alternate
// with the other direction keep both busy: between two virtual-cluster hosts, 128 KiB sends
// and 256 KiB receives took 2-rank allgather and allreduce at 1-256 MiB from 1.4-2.1 GB/s to
// 2.0-4.1 in alternating runs (2.0-3.7 in docs/PERFORMANCE.md), where iperf3 one way gives
// 2.2-2.4. They cost 5-10% on four such hosts, where four ranks share two cores and each
// extra call takes CPU from a peer: a real host has cores of its own. The caps also keep one
// fast link from starving the other links a progress loop drives.
constexpr size_t kMaxSendPerCall = 128 << 10;
constexpr size_t kMaxRecvPerCall = kStagingBytes;

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

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

}  // namespace

void tune_socket_buffers(int fd) {
  if (!kernel_grants_buffers()) return;
  const int want = kSocketBufferBytes;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
}

TcpPair::TcpPair(const std::vector<int>& fds, int self_rank, int peer_rank,
                 std::string peer_address)
    : rails_(std::clamp<size_t>(fds.size(), 1, kMaxRails)),
      self_rank_(self_rank),
      peer_rank_(peer_rank),
      peer_address_(std::move(peer_address)),
      staging_(new std::byte[kStagingBytes]) {
  fds_.fill(-1);
  std::copy_n(fds.begin(), std::min(fds.size(), kMaxRails), fds_.begin());
  // Touch every page now so the first receives do not fault them in.
  std::memset(staging_.get(), 0, kStagingBytes);
  for (size_t r = 0; r < rails_; ++r) {
    const int flags = fcntl(fds_[r], F_GETFL, 0);
    if (flags >= 0) fcntl(fds_[r], F_SETFL, flags | O_NONBLOCK);
    // Collectives send small latency-bound messages; Nagle would hold them back.
    const int one = 1;
    setsockopt(fds_[r], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
}

void TcpPair::name_rails() const {
  for (size_t r = 0; r < rails_; ++r) {
    SockAddr local;
    socklen_t len = sizeof local.storage;
    if (getsockname(fds_[r], reinterpret_cast<sockaddr*>(&local.storage), &len) == 0) {
      local.len = len;
      if (auto ifname = interface_holding(local); ifname.ok()) rail_ifnames_[r] = *ifname;
    }
    // Rails are distinct interfaces; sockets that share one (a test's, over loopback) still
    // need names of their own, as the health monitor tells paths apart by name.
    for (size_t q = 0; q < r; ++q) {
      if (rail_ifnames_[q] == rail_ifnames_[r]) absl::StrAppend(&rail_ifnames_[r], "#", r);
    }
  }
  rails_named_ = true;
}

TcpPair::~TcpPair() {
  for (size_t r = 0; r < rails_; ++r) {
    ::shutdown(fds_[r], SHUT_RDWR);
    ::close(fds_[r]);
  }
}

absl::StatusOr<size_t> TcpPair::send_some(const std::byte* data, size_t len) {
  return send_flagged(data, len, 0);
}

// A striped link may carry the next bytes on another socket, where they could not release
// this one's held bytes: it sends at once.
absl::StatusOr<size_t> TcpPair::send_some_more(const std::byte* data, size_t len) {
  return send_flagged(data, len, rails_ > 1 ? 0 : MSG_MORE);
}

absl::StatusOr<size_t> TcpPair::send_flagged(const std::byte* data, size_t len, int flags) {
  if (!broken_.ok()) return broken_;
  if (!send_broken_.ok()) return send_broken_;
  if (len == 0) return size_t{0};
  len = std::min(len, kMaxSendPerCall);
  if (rails_ > 1) return send_striped(data, len);
  const ssize_t n = ::send(fds_[0], data, len, MSG_DONTWAIT | MSG_NOSIGNAL | flags);
  if (n >= 0) {
    bytes_sent_.add(static_cast<uint64_t>(n));
    return static_cast<size_t>(n);
  }
  if (would_block(errno)) return size_t{0};
  return fail_sending(errno_error("send", errno, 0));
}

// Each chunk goes whole to its own socket, in stream order: when a socket is full the call
// stops there, since the bytes after it belong to that socket's chunk or to later chunks.
absl::StatusOr<size_t> TcpPair::send_striped(const std::byte* data, size_t len) {
  size_t taken = 0;
  while (taken < len) {
    const size_t rail = rail_at(send_offset_);
    const size_t want = std::min(len - taken, kStripeBytes - send_offset_ % kStripeBytes);
    const ssize_t n = ::send(fds_[rail], data + taken, want, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (would_block(errno)) break;
      return fail_sending(errno_error("send", errno, rail));
    }
    send_offset_ += static_cast<uint64_t>(n);
    taken += static_cast<size_t>(n);
    rail_counters_[rail].sent.add(static_cast<uint64_t>(n));
    if (static_cast<size_t>(n) < want) break;  // that socket is full
  }
  bytes_sent_.add(taken);
  return taken;
}

absl::StatusOr<size_t> TcpPair::recv_some(size_t max, Sink sink) {
  return receive(max, nullptr, &sink);
}

absl::StatusOr<size_t> TcpPair::recv_scatter(const Scatter& to, size_t max) {
  return receive(max, &to, nullptr);
}

// On a striped link the next stream byte is always on the socket of the chunk being read, so
// an empty socket ends the call even when later chunks wait on other sockets: they stay in
// those sockets' kernel buffers until their turn.
absl::StatusOr<size_t> TcpPair::receive(size_t max, const Scatter* to, const Sink* sink) {
  if (!broken_.ok()) return broken_;
  max = std::min(max, kMaxRecvPerCall);
  const bool striped = rails_ > 1;
  size_t handed = 0;
  while (handed < max) {
    const size_t rail = striped ? rail_at(recv_offset_) : 0;
    size_t want = max - handed;
    if (striped) want = std::min<size_t>(want, kStripeBytes - recv_offset_ % kStripeBytes);
    // One system call fills both places of a Scatter: a state and the data behind it.
    iovec parts[2];
    if (to != nullptr) {
      const size_t first = std::min(want, to->run_from(handed));
      parts[0] = {to->at(handed), first};
      parts[1] = {to->rest, want - first};
    } else {
      want = std::min(want, kStagingBytes);
      parts[0] = {staging_.get(), want};
      parts[1] = {nullptr, 0};
    }
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = parts[1].iov_len > 0 ? 2 : 1;
    const ssize_t n = ::recvmsg(fds_[rail], &message, MSG_DONTWAIT);
    if (n > 0) {
      if (to == nullptr) (*sink)(staging_.get(), static_cast<size_t>(n));
      handed += static_cast<size_t>(n);
      if (striped) {
        recv_offset_ += static_cast<uint64_t>(n);
        rail_counters_[rail].received.add(static_cast<uint64_t>(n));
      }
      if (static_cast<size_t>(n) < want) break;  // drained what that socket had
      continue;
    }
    // Bytes already handed over are reported first; the error shows on the next call.
    if (handed > 0) break;
    if (n == 0) return fail(closed_error(rail));
    if (would_block(errno)) break;
    return fail(errno_error("recv", errno, rail));
  }
  bytes_received_.add(handed);
  return handed;
}

absl::Status TcpPair::check_peer() {
  if (!broken_.ok()) return broken_;
  std::array<pollfd, kMaxRails> polls;
  for (size_t r = 0; r < rails_; ++r) polls[r] = {fds_[r], POLLRDHUP, 0};
  if (::poll(polls.data(), rails_, 0) <= 0) return absl::OkStatus();
  // The socket the next byte comes from. A peer that sent its last bytes and exited closes
  // every socket; the others may hold nothing more while this one still has bytes to read.
  const size_t next = rails_ > 1 ? rail_at(recv_offset_) : 0;
  for (size_t r = 0; r < rails_; ++r) {
    const short revents = polls[r].revents;
    if ((revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      const int err = get_int_option(fds_[r], SOL_SOCKET, SO_ERROR);
      return fail(errno_error("poll", err > 0 ? err : ECONNRESET, r));
    }
    // The peer shut its side. Unread bytes it sent before that still belong to the caller;
    // only an empty receive queue means nothing more will ever come.
    int unread = 0;
    if (r == next && (revents & POLLRDHUP) != 0 && ::ioctl(fds_[r], FIONREAD, &unread) == 0 &&
        unread == 0) {
      return fail(closed_error(r));
    }
  }
  return absl::OkStatus();
}

PairStats TcpPair::stats() const {
  PairStats s;
  s.bytes_sent = bytes_sent_.get();
  s.bytes_received = bytes_received_.get();
  s.errors = errors_.get();
  return s;
}

void TcpPair::read_path_counters(PathCounterSink sink) const {
  if (!rails_named_) name_rails();
  for (size_t r = 0; r < rails_; ++r) {
    SocketPathInfo info;
    if (!read_socket_path_info(fds_[r], &info)) continue;
    const std::string_view path = rail_ifnames_[r];
    sink(path, "tcp_retransmits", static_cast<double>(info.retransmits), true);
    sink(path, "tcp_segments_sent", static_cast<double>(info.segments_sent), true);
    sink(path, "tcp_bytes_retransmitted", static_cast<double>(info.bytes_retrans), true);
    sink(path, "tcp_bytes_sent", static_cast<double>(info.bytes_sent), true);
    sink(path, "tcp_bytes_acked", static_cast<double>(info.bytes_acked), true);
    sink(path, "tcp_lost", static_cast<double>(info.lost), false);
    sink(path, "tcp_rtt_us", static_cast<double>(info.rtt_us), false);
    sink(path, "tcp_rttvar_us", static_cast<double>(info.rttvar_us), false);
  }
}

RailStats TcpPair::rail_stats(size_t rail) const {
  if (rail >= rails_) return {};
  if (rails_ == 1) {  // the single-socket path counts only the link's totals
    return {bytes_sent_.get(),
            bytes_received_.get()};
  }
  return {rail_counters_[rail].sent.get(),
          rail_counters_[rail].received.get()};
}

int TcpPair::sndbuf_bytes() const { return get_int_option(fds_[0], SOL_SOCKET, SO_SNDBUF); }
int TcpPair::rcvbuf_bytes() const { return get_int_option(fds_[0], SOL_SOCKET, SO_RCVBUF); }

// A peer that closed its side may have sent its last bytes first: they stay readable, so
// a failed send breaks only the sending direction.
absl::Status TcpPair::fail_sending(absl::Status status) {
  errors_.add(1);
  send_broken_ = std::move(status);
  return send_broken_;
}

absl::Status TcpPair::fail(absl::Status status) {
  errors_.add(1);
  broken_ = std::move(status);
  return broken_;
}

absl::Status TcpPair::errno_error(const char* op, int err, size_t rail) {
  const std::string on_rail =
      rails_ > 1 ? absl::StrCat(" (rail ", rail, " of ", rails_, ")") : std::string();
  return absl::UnavailableError(absl::StrCat(
      "tcp: rank ", self_rank_, " lost its link to peer rank ", peer_rank_, " at ",
      peer_address_, on_rail, ": ", op, ": ", std::strerror(err), "; rank ", peer_rank_,
      " has probably exited or crashed (check its log), or the network between them failed"));
}

absl::Status TcpPair::closed_error(size_t rail) const {
  const std::string on_rail =
      rails_ > 1 ? absl::StrCat(", rail ", rail, " of ", rails_) : std::string();
  return absl::UnavailableError(absl::StrCat(
      "tcp: peer rank ", peer_rank_, " closed the connection to rank ", self_rank_,
      " (link to ", peer_address_, on_rail, "); rank ", peer_rank_,
      " has probably exited or crashed: check its log"));
}

}  // namespace weft::transport::tcp
