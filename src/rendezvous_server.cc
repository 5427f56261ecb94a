#include "src/rendezvous_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/mutex.hpp"
#include "src/bootstrap_wire.hpp"
#include "src/env.hpp"
#include "src/job_secret.hpp"
#include "src/launch_env.hpp"

namespace weft {

namespace wire = bootstrap_wire;

// Server: one thread, non-blocking sockets, one poll() bounded by the deadline.

class RendezvousServer::Impl {
 public:
  Impl(wire::UniqueFd listen, wire::UniqueFd wake, RendezvousAddress address, uint64_t job_id,
       const JobSecret& secret, int size, Deadline deadline)
      : address_(address), job_id_(job_id), secret_(secret), deadline_(deadline),
        listen_(std::move(listen)), wake_(std::move(wake)) {
    if (size > 0) set_size(size, "when the rendezvous started");
  }

  void run() {
    result_ = serve();
    conns_.clear();
    listen_.reset();
    done_.store(true, std::memory_order_release);
  }

  const RendezvousAddress address_;
  const uint64_t job_id_;
  const JobSecret secret_;
  const Deadline deadline_;
  wire::UniqueFd listen_, wake_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  Mutex join_mu_;
  bool joined_ ABSL_GUARDED_BY(join_mu_) = false;
  absl::Status result_;  // written by the thread before done_; read after join

 private:
  static constexpr int kMaxPendingHellos = 1024;
  static constexpr int kMaxLogLines = 32;

  struct Conn {
    wire::UniqueFd fd;
    std::string peer;
    // kHello: reading the hello; kChallenging: sending the challenge; kProof: reading the
    // rank's proof; kWaiting: a registered rank; kReplying: sending the table or a refusal.
    enum class State { kHello, kChallenging, kProof, kWaiting, kReplying } state = State::kHello;
    std::string in;              // the hello (or proof) so far; never longer than `need`
    size_t need = wire::kHelloHeaderBytes;
    std::string hello;           // the whole hello, kept while the rank proves itself
    Proof expected{};            // the proof the rank must send
    int rank = -1;               // set once registered
    std::shared_ptr<const std::string> out;
    size_t sent = 0;
    bool carries_table = false;  // a registered rank's table, not an error reply
  };

  absl::Status serve();
  void accept_all();
  void read_hello(Conn& c);
  void handle_hello(Conn& c);
  void read_proof(Conn& c);
  void admit(Conn& c);
  void refuse(Conn& c, absl::StatusCode code, const std::string& why);
  void complete();
  void flush(Conn& c);
  absl::Status time_out();

  void set_size(int size, std::string source) {
    size_ = size;
    size_source_ = std::move(source);
    by_rank_.assign(size, nullptr);
    blobs_.assign(size, std::string());
  }
  void log(const std::string& what) {
    // Bounded: a port scanner must not flood the job's stderr.
    if (++logged_ <= kMaxLogLines) {
      std::fprintf(stderr, "weft: rendezvous %s: %s%s\n", address_.to_string().c_str(),
                   what.c_str(), logged_ == kMaxLogLines ? " (further messages suppressed)" : "");
    }
  }
  void drop(Conn& c, const std::string& why) {
    log(absl::StrCat("ignored a connection from ", c.peer, ": ", why));
    c.fd.reset();
  }

  std::vector<std::unique_ptr<Conn>> conns_;
  int size_ = 0;  // 0 until known
  std::string size_source_;
  std::vector<Conn*> by_rank_;
  std::vector<std::string> blobs_;
  int arrived_ = 0;
  bool complete_ = false;
  int delivered_ = 0;
  std::vector<int> undelivered_;
  int logged_ = 0;
  absl::Time listen_paused_until_ = absl::InfinitePast();
};

absl::Status RendezvousServer::Impl::serve() {
  std::vector<pollfd> fds;
  std::vector<Conn*> who;
  while (true) {
    if (complete_ && delivered_ + static_cast<int>(undelivered_.size()) == size_) {
      if (undelivered_.empty()) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat(
          "rendezvous at ", address_.to_string(), " could not send the table to ",
          undelivered_.size(), " rank(s), first rank ", undelivered_.front(),
          "; those ranks exited or lost their connection"));
    }
    if (deadline_.expired()) return time_out();
    fds.clear();
    who.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    who.push_back(nullptr);
    const bool listening = listen_.get() >= 0 && absl::Now() >= listen_paused_until_;
    if (listening) {
      fds.push_back({listen_.get(), POLLIN, 0});
      who.push_back(nullptr);
    }
    for (auto& c : conns_) {
      const bool sending =
          c->state == Conn::State::kReplying || c->state == Conn::State::kChallenging;
      fds.push_back({c->fd.get(), static_cast<short>(sending ? POLLOUT : POLLIN), 0});
      who.push_back(c.get());
    }
    // Wake at least every 50 ms while accepting is paused (out of file descriptors).
    int timeout = deadline_.remaining_ms();
    if (listen_.get() >= 0 && !listening) timeout = std::min(timeout, 50);
    const int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("rendezvous poll failed: ", std::strerror(errno)));
    }
    if (n <= 0) continue;
    if (fds[0].revents != 0) {
      return absl::CancelledError(
          absl::StrCat("rendezvous at ", address_.to_string(), " was stopped"));
    }
    if (listening && fds[1].revents != 0) accept_all();
    for (size_t i = 0; i < fds.size(); ++i) {
      Conn* c = who[i];
      if (c == nullptr || fds[i].revents == 0 || !c->fd.valid()) continue;
      switch (c->state) {
        case Conn::State::kHello:
          read_hello(*c);
          break;
        case Conn::State::kProof:
          read_proof(*c);
          break;
        case Conn::State::kWaiting: {
          // A registered rank has nothing more to say: data or EOF means it gave up.
          log(absl::StrCat("rank ", c->rank, " (", c->peer,
                           ") left before every rank had arrived; it may reconnect"));
          by_rank_[c->rank] = nullptr;
          blobs_[c->rank].clear();
          --arrived_;
          c->fd.reset();
          break;
        }
        case Conn::State::kReplying:
        case Conn::State::kChallenging:
          flush(*c);
          break;
      }
    }
    std::erase_if(conns_, [](const auto& c) { return !c->fd.valid(); });
  }
}

void RendezvousServer::Impl::accept_all() {
  while (true) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = accept4(listen_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        log(absl::StrCat("cannot accept more connections (", std::strerror(errno),
                         "); raise `ulimit -n`"));
        listen_paused_until_ = absl::Now() + absl::Milliseconds(50);
      }
      return;  // EAGAIN, or a connection that died in the backlog
    }
    auto c = std::make_unique<Conn>();
    c->fd = wire::UniqueFd(fd);
    auto a = RendezvousAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
    c->peer = a.ok() ? a->to_string() : "an unknown address";
    // Bound the connections that have not said who they are: drop the oldest one, which is
    // far likelier to be an idle stranger than a rank (ranks send their hello at once).
    auto unproven = [](const Conn& o) {
      return o.fd.valid() && o.state != Conn::State::kWaiting && o.state != Conn::State::kReplying;
    };
    int pending = 0;
    for (const auto& o : conns_) pending += unproven(*o);
    if (pending >= kMaxPendingHellos) {
      for (auto& o : conns_) {
        if (unproven(*o)) {
          drop(*o, "too many connections that have not proven themselves");
          break;
        }
      }
    }
    conns_.push_back(std::move(c));
  }
}

void RendezvousServer::Impl::read_hello(Conn& c) {
  while (c.in.size() < c.need) {
    char buf[16384];
    const size_t want = std::min(sizeof(buf), c.need - c.in.size());
    const ssize_t n = recv(c.fd.get(), buf, want, 0);
    if (n == 0) return drop(c, "closed before sending a complete hello");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return drop(c, absl::StrCat("read failed: ", std::strerror(errno)));
    }
    c.in.append(buf, static_cast<size_t>(n));
    if (c.need == wire::kHelloHeaderBytes && c.in.size() == wire::kHelloHeaderBytes) {
      // The header alone decides whether this is a weft rank and how much more to read.
      auto need = wire::hello_length(c.in);
      if (!need.ok()) return drop(c, std::string(need.status().message()));
      c.need = *need;
    }
  }
  handle_hello(c);
}

// Another version or job is told so at once (neither is a secret); anything else must prove
// the job secret before the server looks further.
void RendezvousServer::Impl::handle_hello(Conn& c) {
  c.hello = std::exchange(c.in, std::string());
  const wire::Hello h = wire::parse_hello_header(c.hello);
  const std::string who = absl::StrCat("rank ", h.rank, " (", c.peer, ")");
  if (h.version != wire::kProtocolVersion) {
    return refuse(c, absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(who, " speaks bootstrap protocol ", h.version, " but the "
                               "rendezvous speaks ", wire::kProtocolVersion,
                               "; run the same weft version on every rank"));
  }
  if (h.job_id != job_id_) {
    return refuse(c, absl::StatusCode::kFailedPrecondition,
                  absl::StrFormat("%s brought job id %016x but the rendezvous at %s serves job "
                                  "%016x; that rank has a unique id (or WEFT_COORDINATOR) from "
                                  "another job", who, h.job_id, address_.to_string(), job_id_));
  }
  const Nonce nonce = fresh_nonce();
  auto challenge = std::make_shared<const std::string>(
      wire::encode_challenge(nonce, wire::server_proof(secret_, c.hello, nonce)));
  c.expected = wire::rank_proof(secret_, c.hello, *challenge);
  c.out = std::move(challenge);
  c.sent = 0;
  c.state = Conn::State::kChallenging;
  flush(c);
}

void RendezvousServer::Impl::read_proof(Conn& c) {
  while (c.in.size() < c.need) {
    char buf[sizeof(Proof)];
    const ssize_t n = recv(c.fd.get(), buf, c.need - c.in.size(), 0);
    if (n == 0) return drop(c, "closed instead of proving the job secret");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return drop(c, absl::StrCat("read failed: ", std::strerror(errno)));
    }
    c.in.append(buf, static_cast<size_t>(n));
  }
  Proof got{};
  std::memcpy(got.data(), c.in.data(), got.size());
  c.in = std::string();
  if (!same_proof(got, c.expected)) {
    return drop(c, "its proof of the job secret is wrong (a stranger, a replayed handshake, or "
                   "a rank with another WEFT_JOB_SECRET)");
  }
  admit(c);
}

void RendezvousServer::Impl::admit(Conn& c) {
  const wire::Hello h = wire::parse_hello_header(c.hello);
  const std::string blob = c.hello.substr(wire::kHelloHeaderBytes);
  c.hello = std::string();
  const std::string who = absl::StrCat("rank ", h.rank, " (", c.peer, ")");
  if (complete_) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " arrived after all ", size_, " ranks had; every process "
                               "needs its own rank (check WEFT_RANK or the launcher)"));
  }
  if (h.size < 1 || h.size > static_cast<uint32_t>(kMaxLaunchSize)) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " says the job has ", h.size, " ranks; sizes run from 1 to ",
                               kMaxLaunchSize));
  }
  // Without a size of its own, the server takes the first valid hello's (ncclGetUniqueId
  // does not know the size either); a refused hello teaches it nothing.
  const uint32_t size = size_ != 0 ? static_cast<uint32_t>(size_) : h.size;
  if (h.size != size) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " says the job has ", h.size, " ranks but the rendezvous at ",
                               address_.to_string(), " serves ", size_, " ranks (set ",
                               size_source_, "); every rank must pass the same size"));
  }
  if (h.rank >= size) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " is not below the job size ", size));
  }
  if (size_ != 0 && by_rank_[h.rank] != nullptr) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, ": rank ", h.rank, " already joined from ",
                               by_rank_[h.rank]->peer, "; every process needs its own rank ",
                               "(check WEFT_RANK or the launcher)"));
  }
  auto info = PeerInfo::decode(blob);
  if (!info.ok() || info->rank != static_cast<int>(h.rank)) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " sent a peer info that ",
                               info.ok() ? absl::StrCat("claims rank ", info->rank)
                                         : std::string(info.status().message())));
  }
  if (size_ == 0) set_size(static_cast<int>(size), absl::StrCat("by the hello of rank ", h.rank));
  c.rank = static_cast<int>(h.rank);
  c.state = Conn::State::kWaiting;
  by_rank_[c.rank] = &c;
  blobs_[c.rank] = blob;
  if (++arrived_ == size_) complete();
}

void RendezvousServer::Impl::refuse(Conn& c, absl::StatusCode code, const std::string& why) {
  log(absl::StrCat("refused ", why));
  c.out = std::make_shared<const std::string>(wire::encode_error_reply(code, why));
  c.state = Conn::State::kReplying;
  flush(c);
}

void RendezvousServer::Impl::complete() {
  complete_ = true;
  listen_.reset();  // nobody else belongs here; late duplicates see "connection refused"
  auto table = std::make_shared<const std::string>(wire::encode_table_reply(blobs_));
  blobs_.clear();
  for (Conn* c : by_rank_) {
    c->out = table;
    c->carries_table = true;
    c->state = Conn::State::kReplying;
    flush(*c);
  }
}

void RendezvousServer::Impl::flush(Conn& c) {
  while (c.sent < c.out->size()) {
    const ssize_t n =
        send(c.fd.get(), c.out->data() + c.sent, c.out->size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (c.carries_table) {
      log(absl::StrCat("could not send the table to rank ", c.rank, " (", c.peer, "): ",
                       std::strerror(errno)));
      undelivered_.push_back(c.rank);
    }
    c.fd.reset();
    return;
  }
  if (c.state == Conn::State::kChallenging) {  // now the rank's proof
    c.state = Conn::State::kProof;
    c.out.reset();
    c.sent = 0;
    c.need = sizeof(Proof);
    return;
  }
  // All bytes are queued; close() still delivers them (the peer sent nothing unread).
  if (c.carries_table) ++delivered_;
  c.fd.reset();
}

absl::Status RendezvousServer::Impl::time_out() {
  if (complete_) {
    const std::string detail = absl::StrCat("timed out sending the table: ", delivered_, " of ",
                                            size_, " ranks got it; the others stopped reading");
    log(detail);
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous at ", address_.to_string(), " ", detail));
  }
  std::string missing;
  int listed = 0;
  for (int r = 0; r < size_; ++r) {
    if (by_rank_[r] != nullptr) continue;
    if (++listed <= 8) absl::StrAppend(&missing, listed > 1 ? ", " : "", r);
  }
  if (listed > 8) absl::StrAppend(&missing, ", ...");
  const std::string detail =
      size_ == 0 ? std::string("timed out before any rank arrived")
                 : absl::StrCat("timed out with ", arrived_, " of ", size_,
                                " ranks; missing rank(s) ", missing,
                                ": did they start, with the same unique id / WEFT_COORDINATOR? "
                                "(raise WEFT_TIMEOUT if they are just slow)");
  log(detail);
  const std::string msg = absl::StrCat("rendezvous at ", address_.to_string(), " ", detail);
  // Tell the ranks that did come, best effort: the reply is small enough for the socket buffer.
  for (Conn* c : by_rank_) {
    if (c == nullptr || c->state != Conn::State::kWaiting) continue;
    c->out = std::make_shared<const std::string>(
        wire::encode_error_reply(absl::StatusCode::kDeadlineExceeded, msg));
    c->state = Conn::State::kReplying;
    flush(*c);
  }
  return absl::DeadlineExceededError(msg);
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::start(
    const RendezvousAddress& bind_address, uint64_t job_id, const JobSecret& secret, int size,
    Deadline deadline) {
  if (size < 0 || size > kMaxLaunchSize) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous size ", size, " is outside 0-",
                                                   kMaxLaunchSize));
  }
  auto listen = wire::listen_on(bind_address);
  if (!listen.ok()) return listen.status();
  wire::UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat("eventfd failed: ", std::strerror(errno)));
  }
  auto impl = std::make_unique<Impl>(std::move(listen->first), std::move(wake), listen->second,
                                     job_id, secret, size, deadline);
  Impl* raw = impl.get();
  raw->thread_ = std::thread([raw] { raw->run(); });
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::start(
    const RendezvousAddress& bind_address, uint64_t job_id, const JobSecret& secret, int size) {
  auto config = Config::from_env();
  if (!config.ok()) return config.status();
  return start(bind_address, job_id, secret, size, Deadline::after(config->timeout));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() {
  stop();
  wait().IgnoreError();
}

const RendezvousAddress& RendezvousServer::address() const { return impl_->address_; }

bool RendezvousServer::done() const { return impl_->done_.load(std::memory_order_acquire); }

absl::Status RendezvousServer::wait() {
  MutexLock lock(&impl_->join_mu_);
  if (!impl_->joined_) {
    impl_->thread_.join();
    impl_->joined_ = true;
  }
  return impl_->result_;
}

void RendezvousServer::stop() {
  const uint64_t one = 1;
  // Fails only when the counter would overflow, i.e. stop() was already called.
  [[maybe_unused]] ssize_t n = write(impl_->wake_.get(), &one, sizeof(one));
}

}  // namespace weft
