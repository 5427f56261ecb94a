#include "src/isolation.hpp"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

health::State state_of_use(bool isolated, bool probation) {
  return isolated ? health::State::kIsolated
                  : probation ? health::State::kProbation : health::State::kHealthy;
}

}  // namespace

Isolation::Isolation(Options options, Report report)
    : options_(std::move(options)), report_(std::move(report)) {}

void Isolation::judged(const health::Change& change) {
  // Only the judge's own words about a link of this rank; ISOLATED, PROBATION and the
  // HEALTHY that ends a probation are this class's, coming back through the monitor.
  const auto mine = [](health::State s) {
    return s == health::State::kIsolated || s == health::State::kProbation;
  };
  if (change.scope.kind != health::ScopeKind::kLink || change.scope.peer < 0 ||
      change.scope.peer == options_.rank || mine(change.from) || mine(change.to)) {
    return;
  }
  MutexLock lock(&mu_);
  Link& link = links_[change.scope.peer];
  link.judge = change.to;
  if (change.to == health::State::kFailing) {
    link.failing = true;
    link.reason = change.reason;
  }
  refresh_due();
}

std::optional<RouteChange> Isolation::proposal(absl::Time now) {
  const int64_t due = due_ns_.load(std::memory_order_acquire);
  if (due == INT64_MAX || absl::ToUnixNanos(now) < due) return std::nullopt;
  std::vector<health::Change> reports;
  std::optional<RouteChange> out;
  {
    MutexLock lock(&mu_);
    for (auto& [peer, link] : links_) {
      RouteChange c;
      c.low = static_cast<uint32_t>(std::min(peer, options_.rank));
      c.high = static_cast<uint32_t>(std::max(peer, options_.rank));
      if (link.failing && link.use != Use::kIsolated) {
        c.action = RouteChange::kIsolate;
      } else if (link.use == Use::kIsolated && now - link.since >= options_.quiet) {
        c.action = RouteChange::kRestore;
      } else {
        if (link.use == Use::kProbation && !link.failing &&
            now - link.since >= options_.probation) {
          link.use = Use::kInUse;
          link.since = now;
          reports.push_back(report_of(
              peer, link, health::State::kProbation,
              absl::StrCat("probation passed: in use ", absl::FormatDuration(options_.probation),
                           " without FAILING")));
        }
        continue;
      }
      if (!out || c < *out) out = c;
    }
    refresh_due();
  }
  for (const health::Change& r : reports) report_(r);
  return out;
}

void Isolation::adopted(const RouteChange& change, absl::Time now) {
  const int rank = options_.rank;
  if (change.low != static_cast<uint32_t>(rank) && change.high != static_cast<uint32_t>(rank)) {
    return;
  }
  const int peer = static_cast<int>(change.low == static_cast<uint32_t>(rank) ? change.high : change.low);
  health::Change report;
  {
    MutexLock lock(&mu_);
    Link& link = links_[peer];
    // In use, the state people saw was the judge's.
    const health::State from = link.use == Use::kInUse
                                   ? link.judge
                                   : state_of_use(link.use == Use::kIsolated, link.use == Use::kProbation);
    std::string why;
    if (change.action == RouteChange::kIsolate) {
      // This end's judge may have said nothing (the peer judged it) or stepped down since.
      if (!link.failing) why = absl::StrCat("isolated on rank ", peer, "'s word");
      link.use = Use::kIsolated;
      link.failing = false;
    } else {
      why = absl::StrCat("back in use on probation after ",
                         absl::FormatDuration(now - link.since), " isolated");
      link.use = Use::kProbation;
      // A judge that never stepped down (a quiet time shorter than WEFT_HEALTH_RECOVER) sends
      // no new FAILING: take its word now.
      link.failing = link.judge == health::State::kFailing;
    }
    link.since = now;
    report = report_of(peer, link, from, std::move(why));
    refresh_due();
  }
  report_(report);
}

void Isolation::refresh_due() {
  int64_t due = INT64_MAX;
  for (const auto& [peer, link] : links_) {
    absl::Time at = absl::InfiniteFuture();
    if (link.failing && link.use != Use::kIsolated) {
      at = absl::InfinitePast();
    } else if (link.use == Use::kIsolated) {
      at = link.since + options_.quiet;
    } else if (link.use == Use::kProbation && !link.failing) {
      at = link.since + options_.probation;
    }
    if (at == absl::InfinitePast()) {
      due = 0;
    } else if (at != absl::InfiniteFuture()) {
      due = std::min(due, absl::ToUnixNanos(at));
    }
  }
  due_ns_.store(due, std::memory_order_release);
}

health::Change Isolation::report_of(int peer, const Link& link, health::State from,
                                    std::string why) const {
  health::Change c;
  c.time = absl::Now();
  c.scope.kind = health::ScopeKind::kLink;
  c.scope.peer = peer;
  if (static_cast<size_t>(peer) < options_.link_device.size()) {
    c.scope.device = options_.link_device[peer];
  }
  c.from = from;
  c.to = state_of_use(link.use == Use::kIsolated, link.use == Use::kProbation);
  if (why.empty()) {
    c.reason = link.reason;  // the judge's FAILING that isolated it
  } else {
    c.reason.note = std::move(why);
  }
  return c;
}

}  // namespace weft
