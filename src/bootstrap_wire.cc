#include "src/bootstrap_wire.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace weft::bootstrap_wire {
namespace {

using transport::tcp::SockAddr;

void put_u16(std::string& out, uint16_t v) { out.append(reinterpret_cast<const char*>(&v), 2); }
void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
// Callers check that `in` holds at + sizeof(T) bytes.
template <typename T>
T get_at(std::string_view in, size_t at) {
  T v{};
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

SockAddr to_sock_addr(const RendezvousAddress& address) {
  SockAddr out;
  out.len = address.to_sockaddr(out.storage);
  return out;
}

bool is_self_connection(int fd) {
  // Connecting in a loop to a free local port can make TCP connect the socket to itself
  // (simultaneous open); that is "nobody listens yet", not a rendezvous.
  SockAddr a, b;
  a.len = b.len = sizeof(sockaddr_storage);
  if (getsockname(fd, a.get(), &a.len) != 0 || getpeername(fd, b.get(), &b.len) != 0) {
    return false;
  }
  return a.len == b.len && std::memcmp(&a.storage, &b.storage, a.len) == 0;
}

}  // namespace

void UniqueFd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string encode_hello(uint64_t job_id, int rank, int size, const Nonce& nonce,
                         const std::string& blob) {
  std::string out(kMagic, 4);
  put_u16(out, kProtocolVersion);
  put_u16(out, 0);
  put_u64(out, job_id);
  put_u32(out, static_cast<uint32_t>(rank));
  put_u32(out, static_cast<uint32_t>(size));
  put_u32(out, static_cast<uint32_t>(blob.size()));
  out.append(as_text(nonce));
  return out + blob;
}

std::string encode_challenge(const Nonce& nonce, const Proof& proof) {
  std::string out(kMagic, 4);
  put_u32(out, kChallengeCode);
  out.append(as_text(nonce));
  out.append(as_text(proof));
  return out;
}

Proof server_proof(const JobSecret& secret, std::string_view hello, const Nonce& server_nonce) {
  return prove(secret, "weft rendezvous", {hello, as_text(server_nonce)});
}

Proof rank_proof(const JobSecret& secret, std::string_view hello, std::string_view challenge) {
  return prove(secret, "weft rank", {hello, challenge});
}

Hello parse_hello_header(std::string_view in) {
  Hello h;
  if (in.size() < kHelloHeaderBytes) return h;
  h.magic_ok = std::memcmp(in.data(), kMagic, 4) == 0;
  h.version = get_at<uint16_t>(in, 4);
  h.job_id = get_at<uint64_t>(in, 8);
  h.rank = get_at<uint32_t>(in, 16);
  h.size = get_at<uint32_t>(in, 20);
  h.blob_len = get_at<uint32_t>(in, 24);
  std::memcpy(h.nonce.data(), in.data() + 28, h.nonce.size());
  return h;
}

absl::StatusOr<size_t> hello_length(std::string_view header) {
  const Hello h = parse_hello_header(header);
  if (!h.magic_ok) {
    return absl::InvalidArgumentError(
        absl::StrFormat("not a weft hello (first bytes %s)", hex_prefix(header, 8)));
  }
  if (h.blob_len > kMaxPeerBlobBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "announced a ", h.blob_len, "-byte peer info (limit ", kMaxPeerBlobBytes, ")"));
  }
  return kHelloHeaderBytes + h.blob_len;
}

std::string encode_error_reply(absl::StatusCode code, std::string_view why) {
  std::string out(kMagic, 4);
  put_u32(out, static_cast<uint32_t>(code));
  why = why.substr(0, kMaxMessageBytes);
  put_u32(out, static_cast<uint32_t>(why.size()));
  out.append(why);
  return out;
}

std::string encode_table_reply(const std::vector<std::string>& blobs) {
  std::string out(kMagic, 4);
  put_u32(out, 0);
  put_u32(out, static_cast<uint32_t>(blobs.size()));
  for (const auto& b : blobs) {
    put_u32(out, static_cast<uint32_t>(b.size()));
    out.append(b);
  }
  return out;
}

ReplyHeader parse_reply_header(std::string_view in) {
  ReplyHeader r;
  if (in.size() < kReplyHeaderBytes) return r;
  r.magic_ok = std::memcmp(in.data(), kMagic, 4) == 0;
  r.code = get_at<uint32_t>(in, 4);
  return r;
}

std::string hex_prefix(std::string_view in, size_t n) {
  std::string out;
  for (size_t i = 0; i < std::min(n, in.size()); ++i) {
    absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(in[i]));
  }
  return out;
}

absl::StatusOr<std::pair<UniqueFd, RendezvousAddress>> listen_on(const RendezvousAddress& address) {
  const SockAddr sa = to_sock_addr(address);
  UniqueFd fd(socket(sa.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::InternalError(absl::StrCat("socket failed: ", std::strerror(errno)));
  }
  // A coordinator port is reused job after job; TIME_WAIT remnants must not block it.
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), sa.get(), sa.len) != 0 || listen(fd.get(), SOMAXCONN) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address.to_string(), " for the rendezvous: ", std::strerror(errno),
        errno == EADDRINUSE ? "; another process (an earlier job?) holds that port, pick another"
                            : ""));
  }
  SockAddr bound;
  bound.len = sizeof(bound.storage);
  getsockname(fd.get(), bound.get(), &bound.len);
  auto actual = RendezvousAddress::from_sockaddr(bound.get(), bound.len);
  if (!actual.ok()) return actual.status();
  return std::make_pair(std::move(fd), *actual);
}

absl::Status Client::timed_out(std::string_view doing) const {
  return deadline_error(absl::StrCat(who, " to ", std::string(doing)));
}

absl::Status Client::connect(const RendezvousAddress& to) {
  absl::Duration nap = absl::Milliseconds(2);
  int last = 0;
  while (!deadline.expired()) {
    const SockAddr sa = to_sock_addr(to);
    fd = UniqueFd(socket(sa.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      return absl::InternalError(absl::StrCat("socket failed: ", std::strerror(errno)));
    }
    int err = 0;
    if (::connect(fd.get(), sa.get(), sa.len) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        const int n = poll(&p, 1, deadline.remaining_ms());
        if (n == 0) break;
        socklen_t l = sizeof(err);
        if (n < 0) err = errno;
        else getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &l);
      }
    }
    if (err == 0 && !is_self_connection(fd.get())) return absl::OkStatus();
    if (err == 0) err = ECONNREFUSED;
    // Refused: the server is not up yet. Anything else (no route, bad address) will not
    // heal by itself, so it fails now.
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EINTR && err != EAGAIN) {
      return absl::UnavailableError(absl::StrCat(
          who, " cannot connect to the rendezvous at ", where, ": ", std::strerror(err),
          "; check the address (WEFT_COORDINATOR, WEFT_SOCKET_IFNAME) and firewalls"));
    }
    last = err;
    fd.reset();
    absl::SleepFor(std::min(nap, std::max(deadline.remaining(), absl::ZeroDuration())));
    nap = std::min(nap * 2, absl::Milliseconds(100));
  }
  return timed_out(absl::StrCat("connect to the rendezvous at ", where, " (last attempt: ",
                                last ? std::strerror(last) : "none",
                                "; is the process that serves it, rank 0 or the caller of "
                                "make_unique_id, running?)"));
}

absl::Status Client::wait_for(short events, std::string_view doing) {
  pollfd p{fd.get(), events, 0};
  const int n = poll(&p, 1, deadline.remaining_ms());
  if (n == 0) return timed_out(doing);
  if (n < 0 && errno != EINTR) {
    return absl::InternalError(absl::StrCat("poll failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Client::write_all(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (auto st = wait_for(POLLOUT, absl::StrCat("send its hello to ", where)); !st.ok()) {
        return st;
      }
    } else {
      return absl::UnavailableError(absl::StrCat(who, " lost the rendezvous at ", where,
                                                 " while sending its hello: ",
                                                 std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status Client::read_exact(char* out, size_t len) {
  while (len > 0) {
    const ssize_t n = recv(fd.get(), out, len, 0);
    if (n > 0) {
      out += n;
      len -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (auto st = wait_for(POLLIN, absl::StrCat("receive the table from the rendezvous at ",
                                                  where, " (not every rank has arrived)"));
          !st.ok()) {
        return st;
      }
    } else {
      return absl::UnavailableError(absl::StrCat(
          who, ": the rendezvous at ", where, " closed the connection before sending the table",
          n < 0 ? absl::StrCat(" (", std::strerror(errno), ")") : std::string(),
          "; its process may have stopped or timed out"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Client::read_u32() {
  uint32_t v = 0;
  if (auto st = read_exact(reinterpret_cast<char*>(&v), 4); !st.ok()) return st;
  return v;
}

}  // namespace weft::bootstrap_wire
