#include "transport/tcp/path.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/tcp/linger.hpp"

namespace weft::transport::tcp {
namespace {

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

// A small frame (header and payload) is gathered on the stack and sent with send(): the
// kernel's sendmsg copies and checks the iovec array first, which at this size costs more
// than the copy.
constexpr size_t kGatherUpTo = 512;

}  // namespace

Path::Path(int fd, std::string name)
    : fd_(fd), name_(std::move(name)), inbox_(new std::byte[kInboxBytes]) {
  std::memset(inbox_.get(), 0, kInboxBytes);  // no page faults on the data path
}

Path::~Path() { close_gracefully(fd_); }

absl::Status Path::peer_closed() {
  peer_closed_ = true;
  return absl::UnavailableError("the peer closed the connection");
}

void Path::kill(std::string cause) {
  if (!alive_) return;
  const bool first = twin_ == nullptr || twin_->alive_;
  alive_ = false;
  cause_ = std::move(cause);
  {
    MutexLock lock(&failure_mu_);
    failure_ = cause_;
  }
  dead_.store(true, std::memory_order_release);
  if (first) failures.add(1);  // one failure a rail, whichever socket saw it
  ::shutdown(fd_, SHUT_RDWR);
  // A peer that closed its control socket is leaving, and closes the data socket after what
  // it sent there: that is read to its end (the last bytes a rank sends before it fails the
  // communicator tell why). Any other death takes the twin at once, so that no control
  // frame goes where the peer no longer reads.
  if (twin_ != nullptr && !(is_control_ && peer_closed_)) twin_->kill(cause_);
}

absl::Status Path::errno_status(const char* op, int err) {
  error_ = err;
  return absl::UnavailableError(absl::StrCat(op, ": ", std::strerror(err)));
}

absl::StatusOr<size_t> Path::read(const iovec* parts, int count) {
  return read_parts(parts, count, false);
}

absl::StatusOr<size_t> Path::read_to_frame_end(const iovec* parts, int count) {
  return read_parts(parts, count, true);
}

absl::StatusOr<size_t> Path::read_parts(const iovec* parts, int count, bool read_ahead) {
  // Bytes read ahead come first; what they do not fill is read from the socket.
  iovec rest[3];
  int n_rest = 0;
  size_t got = 0;
  for (int i = 0; i < count && i < 2; ++i) {
    auto* base = static_cast<std::byte*>(parts[i].iov_base);
    size_t len = parts[i].iov_len;
    const size_t take = std::min(len, inbox_end_ - inbox_begin_);
    if (take > 0) {
      std::memcpy(base, inbox_.get() + inbox_begin_, take);
      inbox_begin_ += take;
      got += take;
      base += take;
      len -= take;
    }
    if (len > 0) rest[n_rest++] = {base, len};
  }
  if (n_rest == 0) return got;
  if (!alive_) {
    if (got > 0) return got;
    return absl::UnavailableError(cause_);
  }
  size_t wanted = 0;
  for (int i = 0; i < n_rest; ++i) wanted += rest[i].iov_len;
  // The inbox is empty here (the parts took all it had), so it can take what follows.
  if (read_ahead) {
    inbox_begin_ = inbox_end_ = 0;
    rest[n_rest++] = {inbox_.get(), kInboxBytes};
  }
  msghdr message{};
  message.msg_iov = rest;
  message.msg_iovlen = n_rest;
  const ssize_t n = ::recvmsg(fd_, &message, MSG_DONTWAIT);
  size_t asked = wanted + (read_ahead ? kInboxBytes : 0);
  drained_ = n < static_cast<ssize_t>(asked);
  if (n > 0) {
    const size_t into_parts = std::min(static_cast<size_t>(n), wanted);
    if (read_ahead) inbox_end_ = static_cast<size_t>(n) - into_parts;
    got += into_parts;
    bytes_received.add(static_cast<uint64_t>(n));
  } else if (got == 0) {  // bytes already read are reported first; the error shows next time
    if (n == 0) return peer_closed();
    if (!would_block(errno)) return errno_status("recv", errno);
  }
  return got;
}

absl::StatusOr<std::optional<Frame>> Path::read_header() {
  if (inbox_end_ - inbox_begin_ < kFrameHeaderBytes) {
    if (!alive_) return absl::UnavailableError(cause_);
    // Keep what is there at the front and read ahead behind it.
    const size_t have = inbox_end_ - inbox_begin_;
    std::memmove(inbox_.get(), inbox_.get() + inbox_begin_, have);
    inbox_begin_ = 0;
    inbox_end_ = have;
    const ssize_t n = ::recv(fd_, inbox_.get() + have, kInboxBytes - have, MSG_DONTWAIT);
    drained_ = n < static_cast<ssize_t>(kInboxBytes - have);
    if (n == 0) return peer_closed();
    if (n < 0) {
      if (would_block(errno)) return std::optional<Frame>();
      return errno_status("recv", errno);
    }
    inbox_end_ += static_cast<size_t>(n);
    bytes_received.add(static_cast<uint64_t>(n));
    if (inbox_end_ < kFrameHeaderBytes) return std::optional<Frame>();
  }
  auto f = decode_frame(inbox_.get() + inbox_begin_);
  if (!f.ok()) return f.status();
  inbox_begin_ += kFrameHeaderBytes;
  return std::optional<Frame>(*f);
}

std::string Path::failure_seen_elsewhere() const {
  MutexLock lock(&failure_mu_);
  return failure_;
}

absl::StatusOr<size_t> Path::write(const iovec* parts, int count, int flags) {
  if (!alive_) return absl::UnavailableError(cause_);
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += parts[i].iov_len;
  ssize_t n;
  if (count > 1 && total <= kGatherUpTo) {
    std::byte gathered[kGatherUpTo];
    size_t at = 0;
    for (int i = 0; i < count; ++i) {
      std::memcpy(gathered + at, parts[i].iov_base, parts[i].iov_len);
      at += parts[i].iov_len;
    }
    n = ::send(fd_, gathered, total, MSG_DONTWAIT | MSG_NOSIGNAL | flags);
  } else {
    msghdr message{};
    message.msg_iov = const_cast<iovec*>(parts);
    message.msg_iovlen = count;
    n = ::sendmsg(fd_, &message, MSG_DONTWAIT | MSG_NOSIGNAL | flags);
  }
  if (n >= 0) {
    bytes_sent.add(static_cast<uint64_t>(n));
    return static_cast<size_t>(n);
  }
  if (would_block(errno)) return size_t{0};
  return errno_status("send", errno);
}

}  // namespace weft::transport::tcp
