#include "transport/tcp/listener.hpp"

#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/tcp/liveness.hpp"
#include "transport/tcp/pair.hpp"

namespace weft::transport::tcp {
namespace {

// A real dialer sends its hello right after connecting and its proof right after the ack;
// anything slower is a stranger.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(2);
// How long accepting pauses after accept(2) fails for want of file descriptors.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(50);
constexpr size_t kMaxPending = 64;
constexpr int kMaxAcceptsPerRound = 64;

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

}  // namespace

Listener::Listener(const TransportInit& init, std::vector<int> listen_fds, std::string address,
                   Relays* relays)
    : init_(init),
      listen_fds_(std::move(listen_fds)),
      address_(std::move(address)),
      relays_(relays),
      refusals_(absl::StrCat("tcp: rank ", init.rank, " (", address_, ")")) {}

Listener::~Listener() {
  // Connections still mid-handshake are strangers too: counted, so the closing summary
  // (RefusalLog's destructor, after this) shows them.
  for (const Pending& p : pending_) {
    refusals_.counted(p.proving ? "silent after the ack" : p.got == 0 ? "silent" : "an incomplete hello",
                      absl::StrCat("closed a connection from ", p.from,
                                   " that had not finished its handshake when the listener closed"));
    close_fd(p.fd);
  }
  for (const auto& [rank, link] : stash_) {
    for (int fd : link.fds) close_fd(fd);
  }
  for (int fd : listen_fds_) ::close(fd);
}

void Listener::add_poll_fds(std::vector<pollfd>& fds) const {
  const short listen_events = accept_paused_until_ > monotonic_now() ? short{0} : short{POLLIN};
  for (int fd : listen_fds_) fds.push_back({fd, listen_events, 0});
  for (const Pending& p : pending_) fds.push_back({p.fd, POLLIN, 0});
}

void Listener::serve() {
  for (Pending& p : pending_) {
    if (!read_handshake(p)) p.fd = -1;
  }
  const absl::Time now = monotonic_now();
  for (Pending& p : pending_) {
    if (p.fd < 0 || now - p.accepted_at < kHandshakeTimeout) continue;
    refusals_.counted(p.proving ? "silent after the ack" : p.got == 0 ? "silent" : "an incomplete hello",
                      absl::StrCat("closed a connection from ", p.from,
                                   " that did not finish its handshake in ",
                                   absl::FormatDuration(kHandshakeTimeout), " (",
                                   p.proving ? "no proof after the ack" : "an incomplete hello",
                                   "; not a weft rank?)"));
    close_fd(std::exchange(p.fd, -1));
  }
  std::erase_if(pending_, [](const Pending& p) { return p.fd < 0; });
  for (int fd : listen_fds_) {
    if (now >= accept_paused_until_) accept_new(fd);
  }
}

void Listener::accept_new(int listen_fd) {
  for (int i = 0; i < kMaxAcceptsPerRound; ++i) {
    SockAddr remote;
    remote.len = sizeof remote.storage;
    const int fd = ::accept4(listen_fd, remote.get(), &remote.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // The connection stays queued and the listener readable: pause accepting so the
        // wait does not spin until the deadline.
        accept_paused_until_ = monotonic_now() + kAcceptPause;
        log_warning(absl::StrCat("tcp: rank ", init_.rank, " cannot accept on ", address_, ": ",
                                 std::strerror(errno), " (out of file descriptors? raise ulimit -n)"));
      }
      return;
    }
    if (pending_.size() >= kMaxPending) {  // a flood of strangers must not exhaust fds
      refusals_.counted("dropped under a flood",
                        absl::StrCat(kMaxPending, " unfinished handshakes; dropped the oldest, from ",
                                     pending_[0].from));
      close_fd(pending_[0].fd);
      pending_.erase(pending_.begin());
    }
    Pending& p = pending_.emplace_back();
    p.fd = fd, p.from = format_address(remote), p.accepted_at = monotonic_now();
    // The hello usually arrives with the connection; read it without another poll.
    if (!read_handshake(p)) pending_.pop_back();
  }
}

bool Listener::read_handshake(Pending& p) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    // Exactly the message expected: bytes after the proof are the link's first data.
    const size_t want = p.proving ? kProofBytes : kHelloBytes;
    const ssize_t n = ::recv(p.fd, p.buf.data() + p.got, want - p.got, MSG_DONTWAIT);
    if (n > 0) {
      p.got += static_cast<size_t>(n);
      if (p.proving) {
        if (p.got < want) continue;
        check_proof(p);
        return false;
      }
      // A dialer of another version sends a hello of another length and waits for the ack:
      // answer (reject) it now, not once bytes arrive that never will.
      if (p.got < want && !other_version(p.buf.data(), p.got)) continue;
      if (!answer_hello(p)) return false;
      continue;  // the proof may already be here
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && p.got == 0 && !p.proving) {
      // Closed without a byte: a port scan's connect. Nothing reached weft. (weft's own
      // checks that a rank lives ask it, liveness.hpp.)
      refusals_.counted("closed without a byte", absl::StrCat("a connection from ", p.from,
                                                              " closed without a byte"));
      close_fd(p.fd);
      return false;
    }
    refusals_.counted(p.proving ? "a truncated proof" : "a truncated hello",
                      absl::StrCat("lost a connection from ", p.from, " during its ",
                                   p.proving ? "proof" : "hello", ": ",
                                   n == 0 ? "closed by the remote end" : std::strerror(errno)));
    close_fd(p.fd);
    return false;
  }
  return true;
}

bool Listener::answer_hello(Pending& p) {
  const Handshake h = decode_hello(p.buf.data());
  if (h.magic == kHandshakeMagic && h.version == kHandshakeVersion && h.verdict == kQuery &&
      h.job_id == init_.job_id && h.to_rank == static_cast<uint32_t>(init_.rank)) {
    answer_liveness_query(p, h);
    return false;
  }
  const bool relayed = h.verdict == kRelay || h.verdict == kAddPath;
  if (h.magic != kHandshakeMagic ||
      (h.verdict != kHello && !relayed && h.version == kHandshakeVersion)) {
    refusals_.refused("not a weft hello",
                      absl::StrCat("closed a connection from ", p.from,
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
  } else if (relayed && relays_ == nullptr) {
    why = "it asks for a relay path, which this rank does not make (WEFT_RELAY_PATHS=off)";
  } else if (h.verdict == kRelay) {
    // Any rank may ask any other to relay; `rail` names the far end.
    if (h.from_rank >= h.size || h.from_rank == rank || h.rail >= h.size || h.rail == rank ||
        h.rail == h.from_rank) {
      why = absl::StrCat("it asks rank ", rank, " to relay rank ", h.from_rank, " to rank ",
                         h.rail, ", which are not two other ranks of the communicator");
    }
  } else if (h.from_rank >= rank) {
    why = absl::StrCat("rank ", h.from_rank, " should not dial rank ", rank, " (the lower dials)");
  } else if (h.verdict == kAddPath) {
    // `rail` numbers the dialer's attempt and the socket of the path (relay.hpp).
    if (h.rail_count != 2) {
      why = absl::StrCat("it offers a socket of a new path of ", h.rail_count,
                         " sockets, and a path has two");
    }
  } else if (h.rail_count == 0 || h.rail_count % 2 != 0 || h.rail_count > 2 * kMaxRails) {
    // The dialer opens an outbound and an inbound socket per path, at most kMaxRails paths.
    why = absl::StrCat("it opens a link of ", h.rail_count,
                       " sockets (an even number, at most ", 2 * kMaxRails,
                       "), and this rank listens on ",
                       listen_fds_.size(), " (", address_, ")");
  } else if (h.rail >= h.rail_count) {
    why = absl::StrCat("it claims to be socket ", h.rail, " of a link of ", h.rail_count,
                       " sockets (sockets count from 0)");
  }
  Handshake ack;
  ack.job_id = init_.job_id, ack.from_rank = rank, ack.to_rank = h.from_rank;
  ack.size = init_.size, ack.verdict = why.empty() ? kAccepted : kRejected;
  ack.rail = h.rail, ack.rail_count = h.rail_count;
  ack.nonce = fresh_nonce();
  HelloWire hello{};
  std::copy(p.buf.begin(), p.buf.begin() + kHelloBytes, hello.begin());
  AckWire out = encode_ack(ack);
  if (why.empty()) {
    ack.proof = listener_proof(init_.secret, hello, out);
    out = encode_ack(ack);
    p.expected = dialer_proof(init_.secret, hello, out);
  }
  // A fresh socket's send buffer is empty, so 88 bytes never block.
  const ssize_t n = ::send(p.fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (why.empty() && n != static_cast<ssize_t>(out.size())) why = "the ack could not be sent";
  if (!why.empty()) {
    refusals_.refused("a hello for another job, rank or version",
                      absl::StrCat("rejected a tcp connection from ", p.from, " claiming rank ",
                                   h.from_rank, ": ", why));
    close_fd(p.fd);
    return false;
  }
  p.proving = true;
  p.hello = h;
  p.got = 0;
  return true;
}

void Listener::answer_liveness_query(Pending& p, const Handshake& h) {
  HelloWire hello{};
  std::copy(p.buf.begin(), p.buf.begin() + kHelloBytes, hello.begin());
  const Blame blame = init_.blame != nullptr
                          ? Blame::unpack(init_.blame->load(std::memory_order_acquire))
                          : Blame{};
  const AckWire answer = answer_query(init_, hello, h, blame);
  // A fresh socket's send buffer is empty: the answer never blocks. Who asked learns nothing
  // it could not learn from a failed call of its own; the proof stops forged answers.
  (void)!::send(p.fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  close_fd(p.fd);
}

void Listener::check_proof(Pending& p) {
  Proof proof{};
  std::copy(p.buf.begin(), p.buf.begin() + kProofBytes, proof.begin());
  const int from = static_cast<int>(p.hello.from_rank);
  if (!same_proof(proof, p.expected)) {
    refusals_.refused("a wrong proof of the secret",
                      absl::StrCat("refused a tcp connection from ", p.from, " claiming rank ",
                                   from, ": its proof of the job secret is wrong (a stranger, a "
                                   "replayed handshake, or ", kOtherSecretHint, ")"));
    close_fd(p.fd);
    return;
  }
  if (p.hello.verdict == kRelay) return relays_->relay(p.fd, from, static_cast<int>(p.hello.rail));
  if (p.hello.verdict == kAddPath) {
    // kAddPath's rail: the dialer's attempt, then which socket of the path (relay.hpp).
    return relays_->deliver(from, static_cast<int>(p.hello.rail & 1U), p.hello.rail >> 1, p.fd,
                            absl::StrCat("a relay at ", p.from));
  }
  if (auto late = missing_.find(from);
      late != missing_.end() && p.hello.rail < 64 && ((late->second >> p.hello.rail) & 1U) != 0) {
    // The link started without this path (pair.hpp); closing it tells the dialer, which
    // may have counted it, that the path failed.
    late->second &= ~(uint64_t{1} << p.hello.rail);
    log_warning(absl::StrCat("tcp: socket ", p.hello.rail, " of rank ", from, "'s link to rank ",
                             init_.rank, " arrived after the link started without it; closed"));
    close_fd(p.fd);
    return;
  }
  Stashed& link = stash_[from];
  if (link.rail_count != p.hello.rail_count) {
    // A dialer plans its link from the bootstrap's addresses, the same every time: sockets
    // counting other rails are left from an attempt that cannot finish.
    if (link.arrived > 0) {
      log_warning(absl::StrCat("tcp: rank ", from, " dialed rank ", init_.rank, " over ",
                          p.hello.rail_count, " rails after ", link.arrived, " socket(s) of a ",
                          link.rail_count, "-rail link; dropped those"));
    }
    for (int& fd : link.fds) close_fd(std::exchange(fd, -1));
    link.fds.fill(-1);
    link.rail_count = p.hello.rail_count, link.arrived = 0;
    link.first_whole_path = absl::InfiniteFuture();
  }
  int& slot = link.fds[p.hello.rail];
  if (slot >= 0) {
    close_fd(slot);  // the dialer gave up on the old one and dialed again
  } else {
    ++link.arrived;
  }
  slot = p.fd;
  if (link.first_whole_path == absl::InfiniteFuture() &&
      whole_paths(link.rail_count, [&](size_t i) { return link.fds[i] >= 0; }) != 0) {
    link.first_whole_path = monotonic_now();
  }
}

std::vector<int> Listener::take(int rank) {
  auto it = stash_.find(rank);
  if (it == stash_.end()) return {};
  Stashed& link = it->second;
  const bool partial = link.arrived < link.rail_count;
  if (partial && monotonic_now() - link.first_whole_path < absl::Milliseconds(init_.path_timeout_ms)) {
    return {};
  }
  // A dialer closes its sockets only when it gives up on the whole link, and then dials
  // every socket again: a link whose every socket hung up is such a leftover. One that lost
  // only some sockets lost paths (the dialer already sent, and a path failed): the link
  // runs on the others, and the pair tells the story.
  const bool all_gone = std::all_of(link.fds.begin(), link.fds.begin() + link.rail_count,
                                    [](int fd) { return peer_hung_up(fd); });
  if (all_gone) {
    log_warning(absl::StrCat("tcp: rank ", rank, " closed its acked connections (", link.rail_count,
                             " sockets) to rank ", init_.rank, " before rank ", init_.rank,
                             " took them; waiting for new ones"));
    for (uint32_t r = 0; r < link.rail_count; ++r) close_fd(std::exchange(link.fds[r], -1));
    link.arrived = 0;
    link.first_whole_path = absl::InfiniteFuture();
    return {};
  }
  std::vector<int> fds(link.fds.begin(), link.fds.begin() + link.rail_count);
  missing_.erase(rank);
  if (partial) {
    // Half a path is no path: its socket is closed, so the dialer sees the path fail.
    const uint32_t whole = whole_paths(fds.size(), [&](size_t i) { return fds[i] >= 0; });
    const size_t paths = fds.size() / 2;
    uint64_t& missing = missing_[rank];
    for (size_t i = 0; i < fds.size(); ++i) {
      if (((whole >> (i % paths)) & 1U) != 0) continue;
      close_fd(std::exchange(fds[i], -1));
      missing |= uint64_t{1} << i;
    }
  }
  stash_.erase(it);
  return fds;
}

std::string Listener::progress_of(int rank) const {
  auto it = stash_.find(rank);
  if (it == stash_.end() || it->second.arrived == 0) return "";
  return absl::StrCat(it->second.arrived, " of the link's ", it->second.rail_count,
                      " sockets arrived");
}

}  // namespace weft::transport::tcp
