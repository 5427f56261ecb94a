// The communicator's links: opened at their first use, counted for the health monitor, tended
// between calls, told of injected faults, and moved as the route changes (an isolated rail,
// a link sent through a third rank).
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "src/comm.hpp"
#include "src/launch_env.hpp"

namespace weft::detail {

absl::StatusOr<transport::Pair*> Comm::link(int peer, Deadline deadline) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InternalError(absl::StrCat("rank ", rank_, " asked for a link to ", peer));
  }
  if (links_[peer] == nullptr) {
    auto pair = topology_.transport_to(peer)->connect(topology_.peers()[peer], deadline);
    if (!pair.ok()) {
      failed_connects_[peer].add(1);
      return pair.status();
    }
    MutexLock lock(&links_mu_);
    links_[peer] = *std::move(pair);
    if (!route_.isolated_rails().empty()) use_rails(peer);
    if (route_.isolated().has(rank_, peer)) links_[peer]->detour(true);
  }
  if (used_[peer] == 0) {
    used_[peer] = 1;
    used_peers_.push_back(peer);
  }
  return links_[peer].get();
}

void Comm::end_call_on_links() {
  for (int peer : used_peers_) {
    if (links_[peer] != nullptr) links_[peer]->call_received();
  }
  for (int peer : used_peers_) {
    if (links_[peer] != nullptr) links_[peer]->call_ends();
    used_[peer] = 0;
  }
  used_peers_.clear();
}

std::vector<LinkStats> Comm::link_stats() const {
  MutexLock lock(&links_mu_);
  std::vector<LinkStats> out;
  for (int peer = 0; peer < size_; ++peer) {
    if (links_[peer] == nullptr) continue;
    const transport::PairStats s = links_[peer]->stats();
    LinkStats l;
    l.peer = peer;
    l.transport = std::string(topology_.transport_to(peer)->name());
    l.bytes_sent = s.bytes_sent, l.bytes_received = s.bytes_received, l.errors = s.errors;
    l.path_failures = s.path_failures, l.resumptions = s.resumptions;
    l.bytes_resent = s.bytes_resent, l.checksum_errors = s.checksum_errors;
    for (auto& p : links_[peer]->paths()) {
      l.paths.push_back({std::move(p.name), p.bytes_sent, p.bytes_received, p.alive,
                         std::move(p.failure)});
    }
    out.push_back(std::move(l));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<health::Watch>> Comm::open_watch() const {
  const auto launch = read_launch_info();
  return health::Watch::open(config_, rank_, launch.ok() ? launch->local_rank : 0, rail_ifnames_);
}

void Comm::walk_links(absl::FunctionRef<void(const health::LinkView&)> visit) const {
  MutexLock lock(&links_mu_);
  for (int peer = 0; peer < size_; ++peer) {
    const uint64_t failed = failed_connects_[peer].get();
    if (links_[peer] == nullptr && failed == 0) continue;
    visit({peer, topology_.transport_to(peer)->name(), links_[peer].get(), failed});
  }
}

void Comm::apply_inject_file() {
  const absl::Time now = absl::Now();
  if (now < inject_next_) return;
  inject_next_ = now + absl::Milliseconds(500);
  struct stat st {};
  const int64_t stamp = ::stat(config_.inject_file.c_str(), &st) == 0
                            ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000007 +
                                  st.st_mtim.tv_nsec + static_cast<int64_t>(st.st_size)
                            : 0;
  if (stamp != inject_stamp_) {
    inject_stamp_ = stamp;
    std::string text;
    if (stamp != 0) {
      std::ifstream in(config_.inject_file);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto parsed = parse_inject_file(text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "weft: rank %d ignores WEFT_INJECT_FILE %s: %s\n", rank_,
                   config_.inject_file.c_str(), std::string(parsed.status().message()).c_str());
      return;
    }
    injected_ = *std::move(parsed);
  }
  // Links opened since the last read get the faults too.
  for (int peer = 0; peer < size_; ++peer) {
    if (links_[peer] == nullptr) continue;
    links_[peer]->inject_corruption(
        corruption_for(injected_, topology_.peers()[peer].address_of("tcp")));
  }
}

bool Comm::tend_links() {
  bool outstanding = false;
  for (auto& link : links_) {
    if (link != nullptr) outstanding |= link->tend();
  }
  return outstanding;
}

void Comm::adopt(const RouteChange& change) {
  const std::string line = route_.adopt(change);
  if (isolation_ != nullptr) {
    // A link isolated with no ring around it still carries the ring's traffic: say so.
    const bool stays = !change.on_rail() && change.isolates() && !route_.usable().ring;
    isolation_->adopted(change, monotonic_now(),
                        stays ? "no ring avoids it: it still carries the ring's traffic, "
                                "through a third rank where it can (tcp relay paths)"
                              : "");
  }
  if (line.empty()) return;
  route_history_.record(route_, line, absl::Now());
  switch_ipc_path();
  // The choices cached per kind were made for the links of the last epoch.
  for (LastChoice& last : last_choice_) last = LastChoice{};
  const int a = static_cast<int>(change.a), b = static_cast<int>(change.b);
  if (change.on_rail()) {
    // Our links to the rail's rank, or all of ours when it is ours.
    MutexLock lock(&links_mu_);
    for (int peer = 0; peer < size_; ++peer) {
      if (links_[peer] != nullptr && (a == rank_ || a == peer)) use_rails(peer);
    }
  } else if (a == rank_ || b == rank_) {
    // An isolated link still carries what no ring avoids (the call check, a ring of 3 hosts):
    // through a third rank, not over its failing paths.
    detour(a == rank_ ? b : a, change.isolates());
  }
  // Rank 0 and the change's ends say so: one place to look, and the ranks that judged it.
  if (rank_ == 0 || rank_ == a || (!change.on_rail() && rank_ == b)) {
    std::fprintf(stderr, "weft: rank %d: %s\n", rank_, line.c_str());
  }
}

void Comm::detour(int peer, bool on) {
  MutexLock lock(&links_mu_);
  if (links_[peer] != nullptr) links_[peer]->detour(on);
}

void Comm::use_rails(int peer) {
  // Rails are numbered alike on every rank (WEFT_SOCKET_IFNAME, the same list everywhere).
  for (size_t rail = 0; rail < rail_ifnames_.size(); ++rail) {
    const int r = static_cast<int>(rail);
    const bool out = route_.rail_isolated(rank_, r) || route_.rail_isolated(peer, r);
    links_[peer]->use_rail(rail_ifnames_[rail], !out);
  }
}

}  // namespace weft::detail
