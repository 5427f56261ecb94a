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
#include "transport/tcp/inbound.hpp"
#include "transport/tcp/outbound.hpp"
#include "transport/tcp/tcp_info.hpp"
#include "src/base/deadline.hpp"

namespace weft::transport::tcp {
namespace {

// kMaxSendPerCall and kMaxRecvPerCall (pair.hpp). A link carries both ways at once (every
// ring step sends and receives), and a socket call holds the socket's lock while the kernel
// copies: packets the peer sends meanwhile wait in
// the socket's backlog, and a receive queue left unread closes the peer's window. One long
// send (a whole 128 MiB segment) thus runs the link half duplex. Short calls that alternate
// with the other direction keep both busy: between two virtual-cluster hosts, 128 KiB sends
// and 256 KiB receives took 2-rank allgather and allreduce at 1-256 MiB from 1.4-2.1 GB/s to
// 2.0-4.1 in alternating runs (2.0-3.7 in docs/PERFORMANCE.md), where iperf3 one way gives
// 2.2-2.4. They cost 5-10% on four such hosts, where four ranks share two cores and each
// extra call takes CPU from a peer: a real host has cores of its own. The caps also keep one
// fast link from starving the other links a progress loop drives.

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

}  // namespace

void tune_socket_buffers(int fd) {
  if (!kernel_grants_buffers()) return;
  const int want = kSocketBufferBytes;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
}

// Paths that stop acknowledging die after the path timeout; an idle one is probed as often,
// so a partition is found on both ends whether or not data was in flight.
void set_path_timeout(int fd, int timeout_ms) {
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int probe_s = std::max(1, timeout_ms / 3000);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof probe_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof probe_s);
  const int probes = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  const unsigned int user_timeout = static_cast<unsigned int>(timeout_ms);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

uint32_t whole_paths(size_t sockets, absl::FunctionRef<bool(size_t)> has) {
  const size_t paths = std::min<size_t>(sockets / 2, kMaxRails);
  uint32_t whole = 0;
  for (size_t k = 0; k < paths; ++k) {
    if (has(k) && has(paths + k)) whole |= 1U << k;
  }
  return whole;
}

TcpPair::TcpPair(const std::vector<int>& fds, int self_rank, int peer_rank,
                 std::string peer_address, const TransportInit& init,
                 std::shared_ptr<PathIntake> intake)
    : rails_(std::clamp<size_t>(fds.size() / 2, 1, kMaxRails)),
      path_timeout_ms_(init.path_timeout_ms),
      self_rank_(self_rank),
      peer_rank_(peer_rank),
      events_(self_rank, peer_rank, std::move(peer_address)),
      intake_(std::move(intake)) {
  for (size_t i = 0; i < fds.size() && i < 2 * kMaxRails; ++i) {
    const int fd = fds[i];
    if (fd >= 0) {
      const int flags = fcntl(fd, F_GETFL, 0);
      if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      // Collectives send small latency-bound messages; Nagle would hold them back.
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      set_path_timeout(fd, init.path_timeout_ms);
    }
    paths_.push_back(std::make_unique<Path>(fd, absl::StrCat("path ", i % rails_)));
  }
  std::vector<Path*> data, control;
  for (size_t r = 0; r < rails_; ++r) {
    paths_[r]->pair_with(paths_[rails_ + r].get());
    data.push_back(paths_[r].get());
    control.push_back(paths_[rails_ + r].get());
  }
  // Both halves then find the path dead at their first call and carry on without it, as
  // after any loss: nothing was sent on it, so nothing is sent again.
  for (size_t r = 0; r < rails_; ++r) {
    if (paths_[r]->fd() >= 0 && paths_[rails_ + r]->fd() >= 0) continue;
    paths_[r]->kill(absl::StrCat("it did not connect within ", init.path_timeout_ms,
                                 " ms (WEFT_PATH_TIMEOUT_MS) of the link's first path"));
    events_.path_lost("connecting", *paths_[r], 0);
  }
  out_ = std::make_unique<Outbound>(data, control, init.checksum, init.faults, &events_,
                                    &riding_acks_);
  in_ = std::make_unique<Inbound>(data, control, init.faults, &events_, &riding_acks_);
  if (intake_ != nullptr) {
    out_->allow_stranding();
    in_->allow_stranding();
  }
}

void TcpPair::adopt(PathIntake::NewPath fresh) {
  const size_t n = added_count_.load(std::memory_order_relaxed);
  if (n + 2 > added_.size()) {
    ::close(fresh.data);
    ::close(fresh.control);
    return;
  }
  const std::string name = absl::StrCat("path ", rails_ + n / 2);
  for (int fd : {fresh.data, fresh.control}) {
    const int flags = fcntl(fd, F_GETFL, 0);
    if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    set_path_timeout(fd, path_timeout_ms_);
  }
  added_[n] = std::make_unique<Path>(fresh.data, name);
  added_[n + 1] = std::make_unique<Path>(fresh.control, name);
  added_[n]->pair_with(added_[n + 1].get());
  added_count_.store(n + 2, std::memory_order_release);
  events_.path_added(*added_[n], fresh.via);
  in_->add_path(added_[n].get(), added_[n + 1].get());
  out_->add_path(added_[n].get(), added_[n + 1].get(),
                 absl::StrCat(name, " added through ", fresh.via));
}

bool TcpPair::has_live_added_path() const {
  const size_t added = added_count_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < added; i += 2) {
    if (added_[i]->alive() && added_[i + 1]->alive()) return true;
  }
  return false;
}

void TcpPair::inject_partition() {
  for (size_t r = 0; r < rails_; ++r) paths_[r]->kill("a partition injected by a test");
  const size_t added = added_count_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < added; i += 2) added_[i]->kill("a partition injected by a test");
}

void TcpPair::tend_added_paths() {
  if (intake_ == nullptr) return;
  if (auto fresh = intake_->take()) adopt(*std::move(fresh));
  const bool detour = detour_wanted_.load(std::memory_order_acquire);
  if (detour != out_->detoured()) out_->detour(detour);
  if (!out_->stranded() && !in_->stranded()) {
    stranded_since_ = absl::InfinitePast();
    // A detour wants a path until one is alive; the one it has stays after it ends.
    const bool want = detour && !has_live_added_path();
    if (want != path_wanted_) intake_->want(path_wanted_ = want);
    return;
  }
  // A peer that closed or reset its paths exited: no relay brings it back.
  const bool gone = std::any_of(paths_.begin(), paths_.end(),
                                [](const auto& p) { return p->peer_gone(); });
  const absl::Time now = monotonic_now();
  if (!gone && stranded_since_ == absl::InfinitePast()) {
    stranded_since_ = now;
    events_.stranded(relay_wait_ms());
    intake_->want(path_wanted_ = true);
    return;
  }
  if (!gone && now - stranded_since_ < absl::Milliseconds(relay_wait_ms())) return;
  absl::Status s = events_.no_path_left(out_->stranded() ? "sending" : "receiving",
                                        out_->why_rails_failed());
  if (!gone) {
    const std::string failure = intake_->failure();
    s = absl::Status(s.code(), absl::StrCat(s.message(), "; and no path through another rank came in ",
                                            relay_wait_ms(), " ms",
                                            failure.empty() ? "" : " (", failure,
                                            failure.empty() ? "" : ")"));
  }
  intake_->want(path_wanted_ = false);
  out_->fail(s);
  in_->fail(s);
}

TcpPair::~TcpPair() = default;

void TcpPair::name_paths() const {
  path_ifnames_.assign(rails_, std::string());
  rail_totals_.assign(rails_, SocketTotals());
  for (size_t r = 0; r < rails_; ++r) {
    SockAddr local;
    socklen_t len = sizeof local.storage;
    if (paths_[r]->fd() < 0) {
      path_ifnames_[r] = absl::StrCat("path ", r);  // it never connected, so left from nowhere
    } else if (getsockname(paths_[r]->fd(), reinterpret_cast<sockaddr*>(&local.storage),
                           &len) == 0) {
      local.len = len;
      if (auto ifname = interface_holding(local); ifname.ok()) path_ifnames_[r] = *ifname;
    }
    // Rails are distinct interfaces; sockets that share one (a test's, over loopback) still
    // need names of their own, as the health monitor tells paths apart by name.
    for (size_t q = 0; q < r; ++q) {
      if (path_ifnames_[q] == path_ifnames_[r]) absl::StrAppend(&path_ifnames_[r], "#", r);
    }
  }
  paths_named_ = true;
}

void TcpPair::use_rail(std::string_view ifname, bool in_use, bool announce) {
  if (!paths_named_) name_paths();
  for (size_t r = 0; r < rails_; ++r) {
    if (path_ifnames_[r] == ifname) out_->set_in_use(r, in_use, announce);
  }
  // Where the peer's next frame comes from is no longer what its last one said.
  if (rails_ > 1) in_->rails_changed();
}

std::vector<std::string> TcpPair::rail_names() const {
  if (!paths_named_) name_paths();
  return path_ifnames_;
}

absl::StatusOr<size_t> TcpPair::send_some(const std::byte* data, size_t len) {
  return send_flagged(data, len, 0);
}

absl::StatusOr<size_t> TcpPair::send_some_more(const std::byte* data, size_t len) {
  return send_flagged(data, len, MSG_MORE);
}

absl::StatusOr<size_t> TcpPair::lend_some(const std::byte* data, size_t len) {
  return send_flagged(data, len, 0, /*lent=*/true);
}

void TcpPair::call_received() { in_->call_received(); }
void TcpPair::call_ends() { out_->call_ends(); }

absl::StatusOr<size_t> TcpPair::send_flagged(const std::byte* data, size_t len, int flags,
                                             bool lent) {
  if (len == 0) return out_->failed().ok() ? absl::StatusOr<size_t>(size_t{0}) : out_->failed();
  // A sender that never waits must still see a detour asked from another thread.
  if (detour_wanted_.load(std::memory_order_relaxed) != out_->detoured()) tend_added_paths();
  return lent ? out_->lend(data, len, flags) : out_->send(data, len, flags);
}

absl::StatusOr<size_t> TcpPair::recv_some(size_t max, Sink sink) {
  return receive(max, nullptr, &sink);
}

absl::StatusOr<size_t> TcpPair::recv_scatter(const Scatter& to, size_t max) {
  return receive(max, &to, nullptr);
}

absl::StatusOr<size_t> TcpPair::receive(size_t max, const Scatter* to, const Sink* sink) {
  auto n = in_->receive(std::min(max, kMaxRecvPerCall), to, sink);
  // A resumption the caller's sends have not finished moves along with its receives. Bytes
  // held for a send that follows leave with it, unless the caller waits for bytes meanwhile.
  if (out_->owes()) {
    (void)out_->tend();
  } else if (out_->holds() && n.ok() && *n == 0) {
    out_->send_held();
  }
  return n;
}

void TcpPair::inject_corruption(double rate) { in_->inject_corruption(rate); }

bool TcpPair::tend() {
  tend_added_paths();
  const bool sending = out_->tend().ok() && (out_->unacknowledged() || out_->owes());
  const bool receiving = in_->tend().ok() && in_->owes();
  return sending || receiving;
}

// A peer that exited after sending its last bytes closes every socket; those bytes stay
// readable, so hang-ups are left to the receives, which see the stream end. Only errors
// (resets, timeouts) are taken here; the receive side's state is what a wait depends on.
absl::Status TcpPair::check_peer() {
  tend_added_paths();
  std::array<pollfd, 2 * (kMaxRails + kMaxAddedPaths)> polls;
  const size_t added = added_count_.load(std::memory_order_relaxed);
  const size_t count = paths_.size() + added;
  auto path_at = [&](size_t i) -> Path& { return i < paths_.size() ? *paths_[i] : *added_[i - paths_.size()]; };
  // Added paths are numbered after the rails, data socket first (Outbound's order).
  auto index_of = [&](size_t i) { return i < paths_.size() ? i % rails_ : rails_ + (i - paths_.size()) / 2; };
  for (size_t i = 0; i < count; ++i) polls[i] = {path_at(i).fd(), POLLIN, 0};
  if (::poll(polls.data(), count, 0) > 0) {
    for (size_t i = 0; i < count; ++i) {
      if ((polls[i].revents & POLLERR) == 0 || !path_at(i).alive()) continue;
      const int err = get_int_option(polls[i].fd, SOL_SOCKET, SO_ERROR);
      const std::string cause = absl::StrCat("poll: ", std::strerror(err > 0 ? err : ECONNRESET));
      out_->lost(index_of(i), cause);  // kills both sockets of the path; both halves resume
      in_->lost(index_of(i), cause);
    }
  }
  (void)out_->tend();
  if (absl::Status s = in_->tend(); !s.ok()) return s;
  return absl::OkStatus();
}

PairStats TcpPair::stats() const {
  PairStats s;
  for (const auto& p : paths_) {
    s.path_failures += p->failures.get();
  }
  for (size_t r = 0; r < rails_; ++r) {
    s.bytes_sent += paths_[r]->payload_sent.get();
    s.bytes_received += paths_[r]->payload_received.get();
  }
  const size_t added = added_count_.load(std::memory_order_acquire);
  for (size_t i = 0; i < added; ++i) {
    s.path_failures += added_[i]->failures.get();
    if (i % 2 == 0) {
      s.bytes_sent += added_[i]->payload_sent.get();
      s.bytes_received += added_[i]->payload_received.get();
    }
  }
  s.errors = s.path_failures;
  s.resumptions = events_.resumptions.get();
  s.bytes_resent = events_.bytes_resent.get();
  s.checksum_errors = events_.checksum_errors.get();
  return s;
}

void TcpPair::read_path_counters(PathCounterSink sink) const {
  if (!paths_named_) name_paths();
  for (size_t r = 0; r < rails_; ++r) {
    const Path& data = *paths_[r];
    const std::string_view path = path_ifnames_[r];
    // A level: 1 once the rail died (it stays dead).
    const bool down = data.dead_seen_elsewhere() || paths_[rails_ + r]->dead_seen_elsewhere();
    sink(path, "path_down", down ? 1.0 : 0.0, false);
    SocketPathInfo info;
    if (data.dead_seen_elsewhere() || !read_socket_path_info(data.fd(), &info)) continue;
    rail_totals_[r].widen(&info);
    sink(path, "tcp_retransmits", static_cast<double>(info.retransmits), true);
    sink(path, "tcp_retransmits_spurious", static_cast<double>(info.dsack_dups), true);
    sink(path, "tcp_segments_sent", static_cast<double>(info.segments_sent), true);
    sink(path, "tcp_bytes_retransmitted", static_cast<double>(info.bytes_retrans), true);
    sink(path, "tcp_bytes_sent", static_cast<double>(info.bytes_sent), true);
    sink(path, "tcp_bytes_acked", static_cast<double>(info.bytes_acked), true);
    sink(path, "tcp_lost", static_cast<double>(info.lost), false);
    sink(path, "tcp_rtt_us", static_cast<double>(info.rtt_us), false);
    sink(path, "tcp_rttvar_us", static_cast<double>(info.rttvar_us), false);
  }
}

// A rail's two sockets are one path to the user, and die together (Path::pair_with).
std::vector<Pair::PathView> TcpPair::paths() const {
  std::vector<PathView> out;
  const size_t added = added_count_.load(std::memory_order_acquire) / 2;
  for (size_t r = 0; r < rails_ + added; ++r) {
    const Path& data = r < rails_ ? *paths_[r] : *added_[2 * (r - rails_)];
    const Path& control = r < rails_ ? *paths_[rails_ + r] : *added_[2 * (r - rails_) + 1];
    PathView v;
    v.name = absl::StrCat("path ", r, r < rails_ ? "" : " (relayed)");
    v.bytes_sent = data.payload_sent.get();
    v.bytes_received = data.payload_received.get();
    v.alive = !data.dead_seen_elsewhere() && !control.dead_seen_elsewhere();
    if (!v.alive) {
      v.failure = data.dead_seen_elsewhere() ? data.failure_seen_elsewhere()
                                             : control.failure_seen_elsewhere();
    }
    out.push_back(std::move(v));
  }
  return out;
}

RailStats TcpPair::rail_stats(size_t rail) const {
  if (rail >= rails_) return {};
  return {paths_[rail]->payload_sent.get(), paths_[rail]->payload_received.get()};
}

int TcpPair::sndbuf_bytes() const {
  return get_int_option(paths_[0]->fd(), SOL_SOCKET, SO_SNDBUF);
}
int TcpPair::rcvbuf_bytes() const {
  return get_int_option(paths_[0]->fd(), SOL_SOCKET, SO_RCVBUF);
}

}  // namespace weft::transport::tcp
