#include "transport/tcp/relay.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/base/deadline.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/pair.hpp"

namespace weft::transport::tcp {
namespace {

constexpr size_t kCopyBytes = 256 << 10;
constexpr int kPollSliceMs = 200;  // how late a stopping transport is noticed

void log_line(const std::string& msg) { std::fprintf(stderr, "weft: %s\n", msg.c_str()); }

// Waits for `events` on `fd`; false once the deadline passes or `stop` is set.
bool wait_for(int fd, short events, const Deadline& deadline, const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_relaxed)) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(deadline.remaining_ms(), 0,
                                                                       kPollSliceMs)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
    if (deadline.expired()) return false;
  }
  return false;
}

absl::Status send_all(int fd, const void* data, size_t len, const Deadline& d,
                      const std::atomic<bool>& stop) {
  const auto* at = static_cast<const uint8_t*>(data);
  while (len > 0) {
    if (!wait_for(fd, POLLOUT, d, stop)) return absl::DeadlineExceededError("send timed out");
    const ssize_t n = ::send(fd, at, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    at += n, len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status recv_all(int fd, void* data, size_t len, const Deadline& d,
                      const std::atomic<bool>& stop) {
  auto* at = static_cast<uint8_t*>(data);
  while (len > 0) {
    if (!wait_for(fd, POLLIN, d, stop)) return absl::DeadlineExceededError("no answer in time");
    const ssize_t n = ::recv(fd, at, len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n == 0) return absl::UnavailableError("closed");
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    at += n, len -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// A connected non-blocking socket to the first of `addresses` that answers in time.
absl::StatusOr<int> connect_any(const std::string& addresses, const Deadline& d,
                                const std::atomic<bool>& stop) {
  auto list = parse_address_list(addresses);
  if (!list.ok()) return list.status();
  std::string tried;
  for (size_t i = 0; i < list->size(); ++i) {
    const SockAddr& to = (*list)[i];
    // Each address gets an equal share of what is left, so a dead rail leaves time for the next.
    const Deadline mine = Deadline::after(absl::Milliseconds(
        std::max<int64_t>(1, d.remaining_ms() / static_cast<int64_t>(list->size() - i))));
    const int fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
    tune_socket_buffers(fd);
    int err = ::connect(fd, to.get(), to.len) == 0 ? 0 : errno;
    if (err == EINPROGRESS && wait_for(fd, POLLOUT, mine, stop)) {
      socklen_t len = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) return fd;
    ::close(fd);
    absl::StrAppend(&tried, tried.empty() ? "" : ", ", format_address(to), ": ",
                    err == EINPROGRESS ? "no answer" : std::strerror(err));
  }
  return absl::UnavailableError(absl::StrCat("cannot connect (", tried, ")"));
}

// The dialer's side of a handshake on a connected socket: hello, ack, proof.
absl::Status shake_hands(int fd, const TransportInit& init, Handshake hello, const Deadline& d,
                         const std::atomic<bool>& stop) {
  hello.job_id = init.job_id, hello.from_rank = static_cast<uint32_t>(init.rank);
  hello.size = static_cast<uint32_t>(init.size), hello.nonce = fresh_nonce();
  const HelloWire out = encode_hello(hello);
  if (absl::Status s = send_all(fd, out.data(), out.size(), d, stop); !s.ok()) return s;
  AckWire in{};
  if (absl::Status s = recv_all(fd, in.data(), in.size(), d, stop); !s.ok()) return s;
  const Handshake ack = decode_ack(in.data());
  if (ack.magic != kHandshakeMagic || ack.version != kHandshakeVersion ||
      ack.job_id != init.job_id || ack.from_rank != hello.to_rank || ack.verdict != kAccepted) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", hello.to_rank,
                                                      " did not accept (see its log)"));
  }
  if (!same_proof(ack.proof, listener_proof(init.secret, out, in))) {
    return absl::PermissionDeniedError(
        absl::StrCat("the answer for rank ", hello.to_rank, " does not know the job secret"));
  }
  const Proof proof = dialer_proof(init.secret, out, in);
  return send_all(fd, proof.data(), proof.size(), d, stop);
}

void make_blocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

// Copies one direction until either end stops, then passes the end on.
void copy_one_way(int from, int to) {
  std::vector<std::byte> buffer(kCopyBytes);
  while (true) {
    const ssize_t n = ::recv(from, buffer.data(), buffer.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size_t sent = 0;
    while (sent < static_cast<size_t>(n)) {
      const ssize_t m = ::send(to, buffer.data() + sent, static_cast<size_t>(n) - sent, MSG_NOSIGNAL);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) {
        ::shutdown(from, SHUT_RDWR);
        return;
      }
      sent += static_cast<size_t>(m);
    }
  }
  ::shutdown(to, SHUT_WR);
}

}  // namespace

PathIntake::~PathIntake() {
  MutexLock lock(&mu_);
  if (pending_.data >= 0) ::close(pending_.data);
  if (pending_.control >= 0) ::close(pending_.control);
}

void PathIntake::offer(int which, uint32_t attempt, int fd, std::string via) {
  MutexLock lock(&mu_);
  if (attempt < last_attempt_) {  // a socket of an attempt the dialer has given up
    ::close(fd);
    return;
  }
  if (attempt > last_attempt_) {  // what an earlier attempt left unpaired never pairs
    for (int* slot : {&pending_.data, &pending_.control}) {
      if (*slot >= 0) ::close(std::exchange(*slot, -1));
    }
    last_attempt_ = attempt;
  }
  int& slot = which == 0 ? pending_.data : pending_.control;
  if (slot >= 0) ::close(slot);  // the same attempt's again: cannot happen, but keep one
  slot = fd;
  pending_.via = std::move(via);
  pending_.attempt = attempt;
  if (pending_.data >= 0 && pending_.control >= 0) ready_.store(true, std::memory_order_release);
}

std::optional<PathIntake::NewPath> PathIntake::take() {
  if (!ready_.load(std::memory_order_acquire)) return std::nullopt;
  MutexLock lock(&mu_);
  ready_.store(false, std::memory_order_relaxed);
  return std::exchange(pending_, NewPath{});
}

void PathIntake::note_failure(std::string why) {
  MutexLock lock(&mu_);
  failure_ = std::move(why);
}

std::string PathIntake::failure() const {
  MutexLock lock(&mu_);
  return failure_;
}

Relays::~Relays() {
  stopping_.store(true);
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    for (int fd : copied_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes the copying threads
    threads = std::move(threads_);
  }
  for (auto& t : threads) t.join();
  for (int fd : copied_fds_) ::close(fd);
}

void Relays::learn_peers(const std::vector<PeerInfo>& peers) {
  MutexLock lock(&mu_);
  peers_.assign(peers.size(), Peer{});
  for (const PeerInfo& p : peers) {
    if (p.rank >= 0 && p.rank < static_cast<int>(peers.size())) {
      peers_[p.rank] = Peer{p.address_of("tcp"), p.host_id};
    }
  }
}

std::shared_ptr<PathIntake> Relays::intake_for(int peer) {
  MutexLock lock(&mu_);
  if (!init_.relay_paths || peers_.size() < 3 || peer < 0 || peer >= static_cast<int>(peers_.size())) {
    return nullptr;
  }
  auto intake = std::make_shared<PathIntake>(peer);
  intakes_[peer] = intake;
  return intake;
}

std::vector<int> Relays::candidates(int peer) const {
  const std::string& mine = peers_[init_.rank].host;
  const std::string& theirs = peers_[peer].host;
  std::vector<int> third_host, same_host;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r) {
    if (r == init_.rank || r == peer || peers_[r].address.empty()) continue;
    (peers_[r].host != mine && peers_[r].host != theirs ? third_host : same_host).push_back(r);
  }
  // Links spread over relays: each starts at its own place in the list.
  if (!third_host.empty()) {
    std::rotate(third_host.begin(), third_host.begin() + (init_.rank + peer) % third_host.size(),
                third_host.end());
  }
  third_host.insert(third_host.end(), same_host.begin(), same_host.end());
  return third_host;
}

void Relays::start(std::function<void()> body) {
  threads_.emplace_back(std::move(body));
}

void Relays::tick() {
  MutexLock lock(&mu_);
  for (auto it = intakes_.begin(); it != intakes_.end();) {
    std::shared_ptr<PathIntake> intake = it->second.lock();
    if (intake == nullptr) {
      intakes_.erase(it++);
      continue;
    }
    const int peer = it->first;
    ++it;
    // The dialer of the link adds its paths, as it made the first ones; not while its pair
    // has yet to take the last one (it still wants one until then).
    if (peer < init_.rank || !intake->wanted() || intake->ready() || dialing_[peer]) continue;
    dialing_[peer] = true;
    start([this, intake] { add_path(intake); });
  }
}

void Relays::add_path(std::shared_ptr<PathIntake> intake) {
  const int peer = intake->peer();
  std::vector<int> order;
  std::vector<Peer> peers;
  {
    MutexLock lock(&mu_);
    order = candidates(peer);
    peers = peers_;
  }
  const auto next_attempt = [this] {
    MutexLock lock(&mu_);
    attempts_ = (attempts_ + 1) & (UINT32_MAX >> 1);  // it travels shifted left by one
    return attempts_;
  };
  std::string failures;
  for (int r : order) {
    if (stopping_.load() || !intake->wanted()) break;
    const Deadline d = Deadline::after(absl::Milliseconds(init_.path_timeout_ms));
    const uint32_t attempt = next_attempt();
    int fds[2] = {-1, -1};
    absl::Status st;
    for (int which = 0; which < 2 && st.ok(); ++which) {
      auto fd = connect_any(peers[r].address, d, stopping_);
      if (!fd.ok()) {
        st = fd.status();
        break;
      }
      fds[which] = *fd;
      Handshake to_relay;
      to_relay.to_rank = static_cast<uint32_t>(r), to_relay.verdict = kRelay;
      to_relay.rail = static_cast<uint32_t>(peer), to_relay.rail_count = 2;
      st = shake_hands(*fd, init_, to_relay, d, stopping_);
      if (!st.ok()) break;
      Handshake through;
      through.to_rank = static_cast<uint32_t>(peer), through.verdict = kAddPath;
      through.rail = attempt << 1 | static_cast<uint32_t>(which), through.rail_count = 2;
      st = shake_hands(*fd, init_, through, d, stopping_);
      if (!st.ok()) st = absl::Status(st.code(), absl::StrCat("through it to rank ", peer, ": ",
                                                              st.message()));
    }
    if (st.ok()) {
      intake->offer(0, attempt, fds[0], absl::StrCat("rank ", r));
      intake->offer(1, attempt, fds[1], absl::StrCat("rank ", r));
      break;
    }
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    absl::StrAppend(&failures, failures.empty() ? "" : "; ", "relay rank ", r, ": ", st.message());
    intake->note_failure(failures);
  }
  if (order.empty()) intake->note_failure("no other rank to relay through");
  MutexLock lock(&mu_);
  dialing_[peer] = false;
}

void Relays::relay(int fd, int from, int to) {
  MutexLock lock(&mu_);
  if (stopping_.load() || to < 0 || to >= static_cast<int>(peers_.size())) {
    ::close(fd);
    return;
  }
  const std::string address = peers_[to].address;
  start([this, fd, from, to, address] {
    const Deadline d = Deadline::after(absl::Milliseconds(init_.path_timeout_ms));
    auto out = connect_any(address, d, stopping_);
    if (!out.ok()) {
      log_line(absl::StrCat("tcp: rank ", init_.rank, " cannot relay rank ", from, "'s path to rank ",
                            to, ": ", out.status().message()));
      ::close(fd);  // the dialer sees it end and tries another relay
      return;
    }
    for (int s : {fd, *out}) {
      make_blocking(s);
      set_path_timeout(s, init_.path_timeout_ms);
    }
    {
      MutexLock lock(&mu_);
      copied_fds_.push_back(fd);
      copied_fds_.push_back(*out);
      if (stopping_.load()) {
        ::shutdown(fd, SHUT_RDWR);
        ::shutdown(*out, SHUT_RDWR);
        return;
      }
      const int back = *out;
      start([fd, back] { copy_one_way(back, fd); });
    }
    log_line(absl::StrCat("tcp: rank ", init_.rank, " relays a path of the link between rank ",
                          from, " and rank ", to));
    copy_one_way(fd, *out);
  });
}

void Relays::deliver(int from, int which, uint32_t attempt, int fd, const std::string& via) {
  std::shared_ptr<PathIntake> intake;
  {
    MutexLock lock(&mu_);
    auto it = intakes_.find(from);
    if (it != intakes_.end()) intake = it->second.lock();
  }
  if (intake == nullptr) {
    log_line(absl::StrCat("tcp: rank ", init_.rank, " got a relayed path from rank ", from,
                          " but has no live link to it; closed"));
    ::close(fd);
    return;
  }
  intake->offer(which, attempt, fd, via);
}

}  // namespace weft::transport::tcp
