#include "transport/tcp/dial.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/tcp/pair.hpp"

namespace weft::transport::tcp {
namespace {

constexpr absl::Duration kFirstRetry = absl::Milliseconds(5);
constexpr absl::Duration kMaxRetry = absl::Milliseconds(200);

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

// What the listener's ack says about where the dialer ended up; Ok when accepted.
absl::Status check_ack(const Handshake& a, const Dial& d) {
  const TransportInit& init = d.init;
  const std::string head = absl::StrCat("tcp: rank ", init.rank, " dialed rank ", d.peer_rank,
                                        " at ", d.text, ", but ");
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
  if (a.job_id != init.job_id || a.from_rank != static_cast<uint32_t>(d.peer_rank)) {
    return absl::FailedPreconditionError(absl::StrCat(
        head, "the listener there is rank ", a.from_rank, " of job ", a.job_id,
        ", not rank ", d.peer_rank, " of job ", init.job_id,
        ": the address is stale or two jobs' bootstraps got mixed up"));
  }
  if (a.size != static_cast<uint32_t>(init.size)) {
    return absl::FailedPreconditionError(absl::StrCat(
        head, "rank ", d.peer_rank, " has a communicator of size ", a.size, " and rank ",
        init.rank, " one of size ", init.size, ": the ranks disagree on the job size"));
  }
  if (a.verdict != kAccepted || a.to_rank != static_cast<uint32_t>(init.rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat(head, "it rejected the hello (see rank ", d.peer_rank, "'s log)"));
  }
  if (a.rail != d.hello.rail || a.rail_count != d.hello.rail_count) {
    return absl::FailedPreconditionError(absl::StrCat(
        head, "it acked rail ", a.rail, " of ", a.rail_count, " for this socket, which is rail ",
        d.hello.rail, " of ", d.hello.rail_count, ": every rank must run the same weft build"));
  }
  return absl::OkStatus();
}

}  // namespace

Dial::Dial(const TransportInit& init, int peer_rank, std::string text, const SockAddr& remote,
           std::optional<SockAddr> local, uint32_t rail, uint32_t rail_count)
    : init(init), peer_rank(peer_rank), text(std::move(text)), addr(remote), local(local),
      backoff(kFirstRetry) {
  hello.job_id = init.job_id, hello.from_rank = init.rank, hello.to_rank = peer_rank;
  hello.size = init.size, hello.rail = rail, hello.rail_count = rail_count;
}

Dial::~Dial() {
  if (fd >= 0) ::close(fd);
}

short Dial::events() const {
  if (phase == kConnecting || phase == kSending || phase == kSendingProof) return POLLOUT;
  return phase == kAwaitingAck ? POLLIN : 0;
}

void Dial::retry_later(std::string why) {
  if (fd >= 0) ::close(fd);
  fd = -1, phase = kIdle, sent = 0, got = 0;
  problem = std::move(why);
  ++failures;
  retry_at = monotonic_now() + backoff;
  backoff = std::min(backoff * 2, kMaxRetry);
}

void Dial::connect_failed(int err) {
  if (err == ECONNREFUSED && init.refused_means_gone) {
    fatal = absl::UnavailableError(absl::StrCat(
        "tcp: rank ", init.rank, " dialed rank ", peer_rank, " at ", text,
        ": connection refused, so rank ", peer_rank, " has exited"));
    return;
  }
  retry_later(absl::StrCat(
      "connect: ", std::strerror(err), ": rank ", peer_rank,
      " has not created its tcp transport yet, has exited, or is unreachable from here"));
}

void Dial::start() {
  hello.nonce = fresh_nonce();
  out = encode_hello(hello);
  fd = ::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return retry_later(absl::StrCat("socket: ", std::strerror(errno)));
  tune_socket_buffers(fd);  // before connecting, so the window scale can use them
  if (local) {
    // Leave from the rail's own address; the port is picked at connect, so that many
    // sockets from one address do not run the ephemeral ports out.
    const int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (::bind(fd, local->get(), local->len) != 0) {
      fatal = absl::UnavailableError(absl::StrCat(
          "tcp: rank ", init.rank, " cannot send from its rail address ", local->ip(),
          " to rank ", peer_rank, " at ", text, ": bind: ", std::strerror(errno)));
      return;
    }
  }
  if (::connect(fd, addr.get(), addr.len) == 0) {
    phase = kSending;
  } else if (errno == EINPROGRESS || errno == EINTR) {
    phase = kConnecting;
  } else {
    connect_failed(errno);
  }
}

void Dial::read_ack() {
  const ssize_t n = ::recv(fd, in.data() + got, in.size() - got, MSG_DONTWAIT);
  if (n < 0 && would_block(errno)) return;
  if (n <= 0) {
    return retry_later(absl::StrCat(
        "rank ", peer_rank, "'s listener dropped the connection during the handshake (",
        n == 0 ? "closed" : std::strerror(errno), ")"));
  }
  got += static_cast<size_t>(n);
  // A listener of another version sends an ack of another length and closes.
  if (got < in.size() && !other_version(in.data(), got)) return;
  fatal = check_ack(decode_ack(in.data()), *this);
  if (!fatal.ok()) return;
  if (!same_proof(decode_ack(in.data()).proof, listener_proof(init.secret, out, in))) {
    fatal = absl::PermissionDeniedError(absl::StrCat(
        "tcp: rank ", init.rank, " dialed rank ", peer_rank, " at ", text,
        ", but the listener could not prove it knows the job secret: a stranger holds that "
        "address, or ", kOtherSecretHint));
    return;
  }
  proof = dialer_proof(init.secret, out, in);
  phase = kSendingProof;
  sent = 0;
}

void Dial::advance(short revents) {
  if (phase == kIdle) {
    if (monotonic_now() < retry_at) return;
    start();
    if (phase != kSending) return;
  }
  if (phase == kConnecting) {
    if (revents == 0) return;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return connect_failed(err);
    phase = kSending;
  }
  if (phase == kSending) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (would_block(errno)) return;
      return retry_later(absl::StrCat("sending the hello failed: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
    if (sent == out.size()) phase = kAwaitingAck;
    return;
  }
  if (phase == kAwaitingAck) {
    read_ack();
    if (phase != kSendingProof) return;
  }
  if (phase == kSendingProof) {
    const ssize_t n =
        ::send(fd, proof.data() + sent, proof.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (would_block(errno)) return;
      return retry_later(absl::StrCat("sending the proof failed: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
    if (sent == proof.size()) phase = kDone;
  }
}

std::string Dial::describe() const {
  if (phase == kAwaitingAck) {
    return absl::StrCat("connected, but rank ", peer_rank,
                        " never answered the handshake: it has not called connect for rank ",
                        init.rank, " (busy, stuck, or waiting for another rank)");
  }
  if (phase == kConnecting && failures == 0) {
    return "the TCP connection never completed, so packets to that address are dropped "
           "(firewall?) or it is unreachable from this host (WEFT_SOCKET_IFNAME picks the "
           "published interfaces)";
  }
  return problem;
}

}  // namespace weft::transport::tcp
