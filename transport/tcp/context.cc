#include "transport/tcp/context.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/tcp/address.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/pair.hpp"

namespace weft::transport::tcp {
namespace {

// A real dialer sends its hello right after connecting and its proof right after the ack;
// anything slower is a stranger.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(2);
// Longest sleep in poll(): bounds how late a stranger's hello timeout is noticed.
constexpr int kTickMs = 50;
constexpr size_t kMaxPending = 64;
constexpr int kMaxAcceptsPerRound = 64;
constexpr absl::Duration kFirstRetry = absl::Milliseconds(5);
constexpr absl::Duration kMaxRetry = absl::Milliseconds(200);

void log_warning(const std::string& msg) { std::fprintf(stderr, "weft: warning: %s\n", msg.c_str()); }

void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

// True once the remote end is gone and left nothing unread.
bool peer_hung_up(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return true;
  int unread = 0;
  return (p.revents & POLLRDHUP) != 0 && ::ioctl(fd, FIONREAD, &unread) == 0 && unread == 0;
}

// What the listener's ack says about where the dialer ended up; Ok when accepted.
absl::Status check_ack(const Handshake& a, const TransportInit& init, int peer_rank,
                       const std::string& addr) {
  const std::string head =
      absl::StrCat("tcp: rank ", init.rank, " dialed rank ", peer_rank, " at ", addr, ", but ");
  if (a.magic != kHandshakeMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        head, "something other than a weft tcp transport answered: the published address is "
              "stale or wrong"));
  }
  if (a.version != kHandshakeVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        head, "the listener speaks handshake version ", a.version, " and this rank version ",
        kHandshakeVersion, ": every rank must run the same weft build"));
  }
  if (a.job_id != init.job_id || a.from_rank != static_cast<uint32_t>(peer_rank)) {
    return absl::FailedPreconditionError(absl::StrCat(
        head, "the listener there is rank ", a.from_rank, " of job ", a.job_id,
        ", not rank ", peer_rank, " of job ", init.job_id,
        ": the address is stale or two jobs' bootstraps got mixed up"));
  }
  if (a.size != static_cast<uint32_t>(init.size)) {
    return absl::FailedPreconditionError(absl::StrCat(
        head, "rank ", peer_rank, " has a communicator of size ", a.size, " and rank ",
        init.rank, " one of size ", init.size, ": the ranks disagree on the job size"));
  }
  if (a.verdict != kAccepted || a.to_rank != static_cast<uint32_t>(init.rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat(head, "it rejected the hello (see rank ", peer_rank, "'s log)"));
  }
  return absl::OkStatus();
}

}  // namespace

/// One connect() call's dial towards a higher rank.
struct TcpTransport::Dial {
  enum Phase { kIdle, kConnecting, kSending, kAwaitingAck, kSendingProof, kDone };
  int peer_rank = -1;
  std::string text;  ///< the peer's published address
  SockAddr addr;
  int fd = -1;
  Phase phase = kIdle;
  Handshake hello;   ///< sent on every attempt, with a fresh nonce each
  HelloWire out{};
  AckWire in{};
  Proof proof{};
  size_t sent = 0, got = 0;
  absl::Time retry_at = absl::InfinitePast();
  absl::Duration backoff = kFirstRetry;
  std::string problem = "no connection attempt has finished";
  int failures = 0;  ///< attempts refused or dropped so far
  absl::Status fatal;

  ~Dial() { close_fd(fd); }
  short events() const {
    if (phase == kConnecting || phase == kSending || phase == kSendingProof) return POLLOUT;
    return phase == kAwaitingAck ? POLLIN : 0;
  }
  // Refused or dropped connections are normal while the peer is still starting up.
  void retry_later(std::string why) {
    close_fd(fd);
    fd = -1, phase = kIdle, sent = 0, got = 0;
    problem = std::move(why);
    ++failures;
    retry_at = absl::Now() + backoff;
    backoff = std::min(backoff * 2, kMaxRetry);
  }
};

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::create(const TransportInit& init) {
  if (init.size <= 0 || init.rank < 0 || init.rank >= init.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tcp: rank ", init.rank, " is outside a communicator of size ", init.size));
  }
  auto ip = choose_listen_ip(init.socket_ifname);
  if (!ip.ok()) return ip.status();
  auto addr = make_sockaddr(*ip, 0);
  if (!addr.ok()) return addr.status();
  auto fail = [&](const char* op) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat("tcp: rank ", init.rank, " cannot listen on ", *ip,
                                               ": ", op, ": ", std::strerror(err),
                                               "; set WEFT_SOCKET_IFNAME to a usable interface"));
  };
  const int fd = ::socket(addr->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("socket");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  tune_socket_buffers(fd);  // accepted sockets inherit the sizes
  SockAddr bound = *addr;
  bound.len = sizeof bound.storage;
  if (::bind(fd, addr->get(), addr->len) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, bound.get(), &bound.len) != 0) {
    auto status = fail("bind/listen");
    ::close(fd);
    return status;
  }
  return std::unique_ptr<TcpTransport>(new TcpTransport(init, fd, format_address(bound)));
}

TcpTransport::TcpTransport(const TransportInit& init, int listen_fd, std::string address)
    : init_(init), listen_fd_(listen_fd), address_(std::move(address)) {}

TcpTransport::~TcpTransport() {
  MutexLock lock(&mu_);
  for (const Pending& p : pending_) close_fd(p.fd);
  for (const auto& [rank, fd] : stash_) close_fd(fd);
  ::close(listen_fd_);
}

bool TcpTransport::viable(const PeerInfo& self, const PeerInfo& peer) const {
  return !peer.address_of("tcp").empty();
}

absl::StatusOr<std::unique_ptr<Pair>> TcpTransport::connect(const PeerInfo& peer,
                                                            Deadline deadline) {
  const int rank = init_.rank;
  if (peer.rank < 0 || peer.rank >= init_.size || peer.rank == rank) {
    return absl::InvalidArgumentError(absl::StrCat("tcp: rank ", rank, " cannot connect to rank ",
                                                   peer.rank, " in a communicator of size ",
                                                   init_.size));
  }
  const std::string peer_addr = peer.address_of("tcp");
  if (peer_addr.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("tcp: rank ", peer.rank, " published no tcp address, so rank ", rank,
                     " cannot reach it over tcp; choose another transport for this link"));
  }
  std::unique_ptr<Dial> dial;
  if (rank < peer.rank) {  // the lower rank dials
    auto addr = parse_address(peer_addr);
    if (!addr.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tcp: rank ", rank, " cannot dial rank ",
                                                     peer.rank, ": ", addr.status().message()));
    }
    dial = std::make_unique<Dial>();
    dial->peer_rank = peer.rank, dial->text = peer_addr, dial->addr = *addr;
    dial->hello.job_id = init_.job_id, dial->hello.from_rank = rank;
    dial->hello.to_rank = peer.rank, dial->hello.size = init_.size;
  }
  // Each round serves everything without blocking under the lock, then sleeps in poll()
  // without it, so concurrent connect() calls never wait on each other's sleep. The poll is
  // only a wake-up hint: the next round retries every socket anyway.
  short dial_revents = 0;
  while (true) {
    std::vector<pollfd> fds;
    {
      MutexLock lock(&mu_);
      serve_listener();
      int fd = -1;
      if (dial == nullptr) {
        fd = take_stashed(peer.rank);
      } else {
        advance_dial(*dial, std::exchange(dial_revents, 0));
        if (!dial->fatal.ok()) return dial->fatal;
        if (dial->phase == Dial::kDone) fd = std::exchange(dial->fd, -1);
      }
      if (fd >= 0) return std::make_unique<TcpPair>(fd, rank, peer.rank, peer_addr);
      if (deadline.expired()) return timeout_error(peer.rank, peer_addr, dial.get());
      fds.push_back({listen_fd_, accept_paused_until_ > absl::Now() ? short{0} : short{POLLIN}, 0});
      for (const Pending& p : pending_) fds.push_back({p.fd, POLLIN, 0});
    }
    int timeout_ms = std::min(deadline.remaining_ms(), kTickMs);
    if (dial != nullptr && dial->fd >= 0) fds.push_back({dial->fd, dial->events(), 0});
    if (dial != nullptr && dial->phase == Dial::kIdle) {
      const int64_t wait = absl::ToInt64Milliseconds(dial->retry_at - absl::Now()) + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, timeout_ms));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) > 0 && dial != nullptr && dial->fd >= 0) {
      dial_revents = fds.back().revents;
    }
  }
}

absl::Status TcpTransport::timeout_error(int peer_rank, const std::string& peer_addr,
                                         const Dial* dial) {
  const int rank = init_.rank;
  std::string what;
  if (dial == nullptr) {
    what = absl::StrCat("rank ", peer_rank, " to dial rank ", rank, "'s tcp listener at ",
                        address_, ": rank ", peer_rank, " has not called connect for rank ", rank,
                        " or cannot reach that address (WEFT_SOCKET_IFNAME picks it)");
  } else {
    what = absl::StrCat("rank ", peer_rank, " at ", peer_addr, " to accept rank ", rank,
                        "'s tcp connection: ");
    if (dial->phase == Dial::kAwaitingAck) {
      absl::StrAppend(&what, "connected, but rank ", peer_rank,
                      " never answered the handshake: it has not called connect for rank ", rank,
                      " (busy, stuck, or waiting for another rank)");
    } else if (dial->phase == Dial::kConnecting && dial->failures == 0) {
      absl::StrAppend(&what, "the TCP connection never completed, so packets to that address "
                             "are dropped (firewall?) or it is unreachable from this host "
                             "(WEFT_SOCKET_IFNAME picks the published interface)");
    } else {
      absl::StrAppend(&what, dial->problem);
    }
  }
  if (!last_rejected_.empty()) absl::StrAppend(&what, " [last rejected: ", last_rejected_, "]");
  return absl::DeadlineExceededError(
      absl::StrCat("tcp: rank ", rank, " ", deadline_error(what).message()));
}

void TcpTransport::serve_listener() {
  for (Pending& p : pending_) {
    if (!read_handshake(p)) p.fd = -1;
  }
  const absl::Time now = absl::Now();
  for (Pending& p : pending_) {
    if (p.fd < 0 || now - p.accepted_at < kHandshakeTimeout) continue;
    reject(absl::StrCat("rank ", init_.rank, " closed a connection from ", p.from,
                        " that did not finish its handshake in ",
                        absl::FormatDuration(kHandshakeTimeout), " (",
                        p.proving ? "no proof after the ack" : "an incomplete hello",
                        "; not a weft rank?)"));
    close_fd(std::exchange(p.fd, -1));
  }
  std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
  if (now >= accept_paused_until_) accept_new();
}

void TcpTransport::accept_new() {
  for (int i = 0; i < kMaxAcceptsPerRound; ++i) {
    SockAddr remote;
    remote.len = sizeof remote.storage;
    const int fd = ::accept4(listen_fd_, remote.get(), &remote.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // The connection stays queued and the listener readable: pause accepting so the
        // wait does not spin until the deadline.
        accept_paused_until_ = absl::Now() + absl::Milliseconds(kTickMs);
        log_warning(absl::StrCat("tcp: rank ", init_.rank, " cannot accept on ", address_, ": ",
                                 std::strerror(errno), " (out of file descriptors? raise ulimit -n)"));
      }
      return;
    }
    if (pending_.size() >= kMaxPending) {  // a flood of strangers must not exhaust fds
      reject(absl::StrCat("rank ", init_.rank, " has ", kMaxPending,
                          " unfinished handshakes; dropped the oldest, from ", pending_[0].from));
      close_fd(pending_[0].fd);
      pending_.erase(pending_.begin());
    }
    Pending& p = pending_.emplace_back();
    p.fd = fd, p.from = format_address(remote), p.accepted_at = absl::Now();
    // The hello usually arrives with the connection; read it without another poll.
    if (!read_handshake(p)) pending_.pop_back();
  }
}

bool TcpTransport::read_handshake(Pending& p) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    // Exactly the message expected: bytes after the proof are the link's first data.
    const size_t want = p.proving ? kProofBytes : kHelloBytes;
    const ssize_t n = ::recv(p.fd, p.buf.data() + p.got, want - p.got, MSG_DONTWAIT);
    if (n > 0) {
      p.got += static_cast<size_t>(n);
      if (p.got < want) continue;
      if (p.proving) {
        check_proof(p);
        return false;
      }
      if (!answer_hello(p)) return false;
      continue;  // the proof may already be here
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && p.got == 0 && !p.proving) {
      // Closed without a byte: a check that something listens (shrink probes peers this
      // way, refuses_connections) or a port scan's connect. Nothing reached weft.
      close_fd(p.fd);
      return false;
    }
    reject(absl::StrCat("rank ", init_.rank, " lost a connection from ", p.from, " during its ",
                        p.proving ? "proof" : "hello", ": ",
                        n == 0 ? "closed by the remote end" : std::strerror(errno)));
    close_fd(p.fd);
    return false;
  }
  return true;
}

bool TcpTransport::answer_hello(Pending& p) {
  const Handshake h = decode_hello(p.buf.data());
  if (h.magic != kHandshakeMagic || h.verdict != kHello) {
    reject(absl::StrCat("rank ", init_.rank, " closed a connection from ", p.from,
                        " that sent bytes that are not a weft tcp hello (a port scanner?)"));
    close_fd(p.fd);
    return false;
  }
  const uint32_t rank = static_cast<uint32_t>(init_.rank);
  std::string why;
  if (h.version != kHandshakeVersion) {
    why = absl::StrCat("it speaks handshake version ", h.version, ", this rank ",
                       kHandshakeVersion);
  } else if (h.job_id != init_.job_id) {
    why = absl::StrCat("it is from job ", h.job_id, ", this rank is in job ", init_.job_id);
  } else if (h.to_rank != rank) {
    why = absl::StrCat("it is meant for rank ", h.to_rank, ", this listener is rank ", rank);
  } else if (h.size != static_cast<uint32_t>(init_.size)) {
    why = absl::StrCat("its communicator has size ", h.size, ", this rank's ", init_.size);
  } else if (h.from_rank >= rank) {
    why = absl::StrCat("rank ", h.from_rank, " should not dial rank ", rank, " (the lower dials)");
  }
  Handshake ack;
  ack.job_id = init_.job_id, ack.from_rank = rank, ack.to_rank = h.from_rank;
  ack.size = init_.size, ack.verdict = why.empty() ? kAccepted : kRejected;
  ack.nonce = fresh_nonce();
  HelloWire hello{};
  std::copy(p.buf.begin(), p.buf.begin() + kHelloBytes, hello.begin());
  AckWire out = encode_ack(ack);
  if (why.empty()) {
    ack.proof = listener_proof(init_.secret, hello, out);
    out = encode_ack(ack);
    p.expected = dialer_proof(init_.secret, hello, out);
  }
  // A fresh socket's send buffer is empty, so 80 bytes never block.
  const ssize_t n = ::send(p.fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (why.empty() && n != static_cast<ssize_t>(out.size())) why = "the ack could not be sent";
  if (!why.empty()) {
    reject(absl::StrCat("rank ", init_.rank, " rejected a tcp connection from ", p.from,
                        " claiming rank ", h.from_rank, ": ", why));
    close_fd(p.fd);
    return false;
  }
  p.proving = true;
  p.claimed_rank = static_cast<int>(h.from_rank);
  p.got = 0;
  return true;
}

void TcpTransport::check_proof(Pending& p) {
  Proof proof{};
  std::copy(p.buf.begin(), p.buf.begin() + kProofBytes, proof.begin());
  if (!same_proof(proof, p.expected)) {
    reject(absl::StrCat("rank ", init_.rank, " refused a tcp connection from ", p.from,
                        " claiming rank ", p.claimed_rank,
                        ": its proof of the job secret is wrong (a stranger, a replayed "
                        "handshake, or a rank with another WEFT_JOB_SECRET)"));
    close_fd(p.fd);
    return;
  }
  if (auto it = stash_.find(p.claimed_rank); it != stash_.end()) {
    close_fd(it->second);  // the dialer gave up on the old one and dialed again
  }
  stash_[p.claimed_rank] = p.fd;
}

int TcpTransport::take_stashed(int rank) {
  auto it = stash_.find(rank);
  if (it == stash_.end()) return -1;
  const int fd = it->second;
  stash_.erase(it);
  if (!peer_hung_up(fd)) return fd;
  reject(absl::StrCat("rank ", rank, " closed its acked connection to rank ", init_.rank,
                      " before rank ", init_.rank, " took it; waiting for a new one"));
  close_fd(fd);
  return -1;
}

void TcpTransport::connect_failed(Dial& d, int err) {
  if (err == ECONNREFUSED && init_.refused_means_gone) {
    d.fatal = absl::UnavailableError(absl::StrCat(
        "tcp: rank ", init_.rank, " dialed rank ", d.peer_rank, " at ", d.text,
        ": connection refused, so rank ", d.peer_rank, " has exited"));
    return;
  }
  d.retry_later(absl::StrCat(
      "connect: ", std::strerror(err), ": rank ", d.peer_rank,
      " has not created its tcp transport yet, has exited, or is unreachable from here"));
}

void TcpTransport::advance_dial(Dial& d, short revents) {
  if (d.phase == Dial::kIdle) {
    if (absl::Now() < d.retry_at) return;
    d.hello.nonce = fresh_nonce();
    d.out = encode_hello(d.hello);
    d.fd = ::socket(d.addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (d.fd < 0) return d.retry_later(absl::StrCat("socket: ", std::strerror(errno)));
    tune_socket_buffers(d.fd);  // before connecting, so the window scale can use them
    if (::connect(d.fd, d.addr.get(), d.addr.len) == 0) {
      d.phase = Dial::kSending;
    } else if (errno == EINPROGRESS || errno == EINTR) {
      d.phase = Dial::kConnecting;
      return;
    } else {
      return connect_failed(d, errno);
    }
  }
  if (d.phase == Dial::kConnecting) {
    if (revents == 0) return;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(d.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return connect_failed(d, err);
    d.phase = Dial::kSending;
  }
  if (d.phase == Dial::kSending) {
    const ssize_t n =
        ::send(d.fd, d.out.data() + d.sent, d.out.size() - d.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return d.retry_later(absl::StrCat("sending the hello failed: ", std::strerror(errno)));
    }
    d.sent += static_cast<size_t>(n);
    if (d.sent == d.out.size()) d.phase = Dial::kAwaitingAck;
    return;
  }
  if (d.phase == Dial::kAwaitingAck) {
    const ssize_t n = ::recv(d.fd, d.in.data() + d.got, d.in.size() - d.got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {
      return d.retry_later(absl::StrCat(
          "rank ", d.peer_rank, "'s listener dropped the connection during the handshake (",
          n == 0 ? "closed" : std::strerror(errno), ")"));
    }
    d.got += static_cast<size_t>(n);
    if (d.got < d.in.size()) return;
    d.fatal = check_ack(decode_ack(d.in.data()), init_, d.peer_rank, d.text);
    if (!d.fatal.ok()) return;
    if (!same_proof(decode_ack(d.in.data()).proof, listener_proof(init_.secret, d.out, d.in))) {
      d.fatal = absl::PermissionDeniedError(absl::StrCat(
          "tcp: rank ", init_.rank, " dialed rank ", d.peer_rank, " at ", d.text,
          ", but the listener could not prove it knows the job secret: a stranger holds that "
          "address, or the ranks were given different WEFT_JOB_SECRET values"));
      return;
    }
    d.proof = dialer_proof(init_.secret, d.out, d.in);
    d.phase = Dial::kSendingProof;
    d.sent = 0;
  }
  if (d.phase == Dial::kSendingProof) {
    const ssize_t n = ::send(d.fd, d.proof.data() + d.sent, d.proof.size() - d.sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return d.retry_later(absl::StrCat("sending the proof failed: ", std::strerror(errno)));
    }
    d.sent += static_cast<size_t>(n);
    if (d.sent == d.proof.size()) d.phase = Dial::kDone;
  }
}

void TcpTransport::reject(const std::string& why) {
  log_warning(absl::StrCat("tcp: ", why));
  last_rejected_ = why;
}

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init) {
  auto transport = TcpTransport::create(init);
  if (!transport.ok()) return transport.status();
  return std::unique_ptr<Transport>(std::move(*transport));
}

}  // namespace weft::transport::tcp
