#include "transport/tcp/context.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/tcp/address.hpp"
#include "transport/tcp/dial.hpp"
#include "transport/tcp/pair.hpp"

namespace weft::transport::tcp {
namespace {

// Longest sleep in poll(): bounds how late a stranger's hello timeout is noticed.
constexpr int kTickMs = 50;
// The acceptor thread's, between connect() calls.
constexpr int kAcceptorTickMs = 500;

// A listening socket on `rail`, on an ephemeral port; its bound address goes to `bound`.
absl::StatusOr<int> listen_on(const Rail& rail, int rank, SockAddr& bound) {
  auto fail = [&](const char* op) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat(
        "tcp: rank ", rank, " cannot listen on ", rail.addr.ip(), " (interface ", rail.ifname,
        "): ", op, ": ", std::strerror(err), "; set WEFT_SOCKET_IFNAME to usable interfaces"));
  };
  const int fd = ::socket(rail.addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("socket");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  tune_socket_buffers(fd);  // accepted sockets inherit the sizes
  bound = rail.addr;
  bound.len = sizeof bound.storage;
  if (::bind(fd, rail.addr.get(), rail.addr.len) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, bound.get(), &bound.len) != 0) {
    auto status = fail("bind/listen");
    ::close(fd);
    return status;
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::create(const TransportInit& init) {
  if (init.size <= 0 || init.rank < 0 || init.rank >= init.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tcp: rank ", init.rank, " is outside a communicator of size ", init.size));
  }
  auto rails = choose_rails(init.socket_ifname);
  if (!rails.ok()) return rails.status();
  std::vector<int> fds;
  std::vector<SockAddr> bound(rails->size());
  for (size_t r = 0; r < rails->size(); ++r) {
    auto fd = listen_on((*rails)[r], init.rank, bound[r]);
    if (!fd.ok()) {
      for (int open : fds) ::close(open);
      return fd.status();
    }
    fds.push_back(*fd);
  }
  return std::unique_ptr<TcpTransport>(
      new TcpTransport(init, *std::move(rails), std::move(fds), format_address_list(bound)));
}

TcpTransport::TcpTransport(const TransportInit& init, std::vector<Rail> rails,
                           std::vector<int> listen_fds, std::string address)
    : init_(init),
      rails_(std::move(rails)),
      address_(std::move(address)),
      relays_(init),
      listener_(init, std::move(listen_fds), address_, &relays_),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  // Without an eventfd (out of descriptors) the listener is served inside connect() only,
  // as it always was.
  if (wake_fd_ < 0) return;
  try {
    acceptor_ = std::thread([this] { serve_until_stopped(); });
  } catch (...) {  // no thread to be had: the destructor will not run, so close it here
    ::close(wake_fd_);
    throw;
  }
}

TcpTransport::~TcpTransport() {
  if (acceptor_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    acceptor_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void TcpTransport::serve_until_stopped() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    {
      MutexLock lock(&mu_);
      listener_.serve();
      listener_.tick();
      listener_.add_poll_fds(fds);
    }
    relays_.tick();
    // The tick bounds how late a stranger's handshake timeout is seen; nothing else waits
    // on it, so it may be long.
    if (::poll(fds.data(), fds.size(), kAcceptorTickMs) > 0 && fds[0].revents != 0) return;
  }
}

bool TcpTransport::viable(const PeerInfo& self, const PeerInfo& peer) const {
  return !peer.address_of("tcp").empty();
}

absl::StatusOr<std::vector<std::unique_ptr<Dial>>> TcpTransport::plan_dials(
    const PeerInfo& peer) const {
  const std::string text = peer.address_of("tcp");
  auto remote = parse_address_list(text);
  if (!remote.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tcp: rank ", init_.rank, " cannot dial rank ",
                                                   peer.rank, ": ", remote.status().message()));
  }
  const std::vector<Route> routes =
      plan_routes(rails_, *remote, init_.single_rail ? 1 : kMaxRails);
  // Each path is two sockets on one route (pair.hpp), sockets_per_rail paths a rail: socket
  // k < K carries data both ways on route k % routes, socket K + k its control frames.
  const uint32_t rails = static_cast<uint32_t>(routes.size());
  const uint32_t per_rail = init_.single_rail ? 1 : static_cast<uint32_t>(init_.sockets_per_rail);
  const uint32_t paths = std::min<uint32_t>(rails * per_rail, kMaxRails);
  const uint32_t count = 2 * paths;
  std::vector<std::unique_ptr<Dial>> dials;
  for (uint32_t k = 0; k < count; ++k) {
    const Route& route = routes[(k % paths) % rails];
    const SockAddr& to = (*remote)[route.remote];
    // A link over one socket leaves from wherever routing says, as links always have; a
    // striped link sends each socket from its own rail, which routing alone may not do
    // when rails share a subnet.
    std::optional<SockAddr> from;
    if (rails > 1) from = rails_[route.local_rail].addr;
    dials.push_back(std::make_unique<Dial>(init_, peer.rank, format_address(to), to, from, k, count));
  }
  return dials;
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
  std::vector<std::unique_ptr<Dial>> dials;  // empty: the higher rank waits to be dialed
  if (rank < peer.rank) {
    auto planned = plan_dials(peer);
    if (!planned.ok()) return planned.status();
    dials = *std::move(planned);
  }
  // Each round serves everything without blocking under the lock, then sleeps in poll()
  // without it, so concurrent connect() calls never wait on each other's sleep. The poll is
  // only a wake-up hint: the next round retries every socket anyway.
  std::vector<short> revents(dials.size(), 0);
  std::vector<pollfd> fds;
  std::vector<size_t> polled;  // which dial each trailing pollfd belongs to
  // A link starts without the paths still incomplete path_timeout_ms after its first whole
  // one (pair.hpp); the listener applies the same rule.
  absl::Time first_whole_path = absl::InfiniteFuture();
  auto done = [&](size_t i) { return dials[i]->phase == Dial::kDone; };
  while (true) {
    fds.clear();
    polled.clear();
    {
      MutexLock lock(&mu_);
      listener_.serve();
      std::vector<int> link;
      if (dials.empty()) {
        link = listener_.take(peer.rank);
      } else {
        bool all_done = true;
        for (size_t i = 0; i < dials.size(); ++i) {
          dials[i]->advance(std::exchange(revents[i], 0));
          if (!dials[i]->fatal.ok()) return dials[i]->fatal;
          all_done &= dials[i]->phase == Dial::kDone;
        }
        const uint32_t whole = whole_paths(dials.size(), done);
        if (whole != 0 && first_whole_path == absl::InfiniteFuture()) {
          first_whole_path = monotonic_now();
        }
        const size_t paths = dials.size() / 2;
        if (all_done || monotonic_now() - first_whole_path >=
                            absl::Milliseconds(init_.path_timeout_ms)) {
          for (size_t i = 0; i < dials.size(); ++i) {
            const bool keep = all_done || ((whole >> (i % paths)) & 1U) != 0;
            link.push_back(keep ? std::exchange(dials[i]->fd, -1) : -1);  // Dial closes the rest
          }
        }
      }
      if (!link.empty()) {
        return std::make_unique<TcpPair>(link, rank, peer.rank, peer_addr, init_,
                                         relays_.intake_for(peer.rank));
      }
      if (deadline.expired()) return timeout_error(peer.rank, peer_addr, dials);
      listener_.add_poll_fds(fds);
    }
    int timeout_ms = std::min(deadline.remaining_ms(), kTickMs);
    for (size_t i = 0; i < dials.size(); ++i) {
      const Dial& d = *dials[i];
      if (d.fd >= 0 && d.events() != 0) {
        fds.push_back({d.fd, d.events(), 0});
        polled.push_back(i);
      } else if (d.phase == Dial::kIdle) {
        const int64_t wait = absl::ToInt64Milliseconds(d.retry_at - monotonic_now()) + 1;
        timeout_ms = static_cast<int>(std::clamp<int64_t>(wait, 0, timeout_ms));
      }
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) > 0) {
      const size_t first = fds.size() - polled.size();
      for (size_t j = 0; j < polled.size(); ++j) revents[polled[j]] = fds[first + j].revents;
    }
  }
}

absl::Status TcpTransport::timeout_error(int peer_rank, const std::string& peer_addr,
                                         const std::vector<std::unique_ptr<Dial>>& dials) {
  const int rank = init_.rank;
  std::string what;
  if (dials.empty()) {
    what = absl::StrCat("rank ", peer_rank, " to dial rank ", rank, "'s tcp listener at ",
                        address_, ": rank ", peer_rank, " has not called connect for rank ", rank,
                        " or cannot reach that address (WEFT_SOCKET_IFNAME picks it)");
    const std::string arrived = listener_.progress_of(peer_rank);
    if (!arrived.empty()) absl::StrAppend(&what, " (", arrived, ")");
  } else {
    const auto stuck = std::find_if(dials.begin(), dials.end(),
                                    [](const auto& d) { return d->phase != Dial::kDone; });
    const Dial& d = **(stuck == dials.end() ? dials.begin() : stuck);
    what = absl::StrCat("rank ", peer_rank, " at ", dials.size() > 1 ? d.text : peer_addr);
    if (dials.size() > 1) absl::StrAppend(&what, " (rail ", d.hello.rail, " of ", dials.size(), ")");
    absl::StrAppend(&what, " to accept rank ", rank, "'s tcp connection: ", d.describe());
  }
  if (!listener_.last_rejected().empty()) {
    absl::StrAppend(&what, " [last rejected: ", listener_.last_rejected(), "]");
  }
  return absl::DeadlineExceededError(
      absl::StrCat("tcp: rank ", rank, " ", deadline_error(what).message()));
}

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init) {
  auto transport = TcpTransport::create(init);
  if (!transport.ok()) return transport.status();
  return std::unique_ptr<Transport>(std::move(*transport));
}

}  // namespace weft::transport::tcp
