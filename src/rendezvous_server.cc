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

#include "absl/strings/str_cat.h"
#include "src/base/env.hpp"
#include "src/launch_env.hpp"
#include "src/rendezvous_server_impl.hpp"

namespace weft {

// Server: one thread, non-blocking sockets, one poll() bounded by the deadline. Admission
// (hello, proof, a place in the table) is in rendezvous_admission.cc.

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
    const bool listening = listen_.get() >= 0 && monotonic_now() >= listen_paused_until_;
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
    // Wake at least every 50 ms while accepting is paused (out of file descriptors), and
    // every second to let a due summary of refusals out.
    refusals_.tick();
    int timeout = std::min(deadline_.remaining_ms(), 1000);
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
        listen_paused_until_ = monotonic_now() + absl::Milliseconds(50);
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
          drop(*o, "dropped under a flood", "too many connections that have not proven themselves", false);
          break;
        }
      }
    }
    conns_.push_back(std::move(c));
  }
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
