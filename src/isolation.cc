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

RouteChange Isolation::change_of(Target t, bool isolate) const {
  if (t.rail) {
    return {isolate ? RouteChange::kIsolateRail : RouteChange::kRestoreRail,
            static_cast<uint32_t>(options_.rank), static_cast<uint32_t>(t.id)};
  }
  return RouteChange::link(isolate ? RouteChange::kIsolateLink : RouteChange::kRestoreLink,
                           options_.rank, t.id);
}

Isolation::Link& Isolation::link_to(int peer) {
  Link& link = links_[Target{false, peer}];
  if (link.scope.peer < 0) {
    link.scope.kind = health::ScopeKind::kLink;
    link.scope.peer = peer;
    if (static_cast<size_t>(peer) < options_.link_device.size()) {
      link.scope.device = options_.link_device[peer];
    }
  }
  return link;
}

void Isolation::judged(const health::Change& change) {
  // Only the judge's own words; ISOLATED, PROBATION and the HEALTHY that ends a probation
  // are this class's, coming back through the monitor.
  const auto mine = [](health::State s) {
    return s == health::State::kIsolated || s == health::State::kProbation;
  };
  if (mine(change.from) || mine(change.to)) return;
  const health::Scope& scope = change.scope;
  const bool peer = scope.peer >= 0 && scope.peer != options_.rank;
  std::vector<int> failing;  // links newly FAILING while in use, told once the lock is free
  {
    MutexLock lock(&mu_);
    switch (scope.kind) {
      case health::ScopeKind::kLink:
      case health::ScopeKind::kNvlink:
        if (peer && judge(Target{false, scope.peer}, change)) failing.push_back(scope.peer);
        break;
      case health::ScopeKind::kGpu:
        for (int p : options_.host_peers) {
          if (judge(Target{false, p}, change)) failing.push_back(p);
        }
        break;
      case health::ScopeKind::kIbPort:
        if (scope.rail >= 0 && static_cast<uint32_t>(scope.rail) < RouteChange::kMaxRails) {
          links_[Target{true, scope.rail}].scope = scope;  // a rail's state shows on its port
          judge(Target{true, scope.rail}, change);
        }
        break;
      case health::ScopeKind::kRail:
        break;  // one socket of one link: its link carries on over its other rails already
    }
    refresh_due();
  }
  if (options_.failing) {
    for (int p : failing) options_.failing(p);
  }
}

bool Isolation::judge(Target target, const health::Change& change) {
  Link& entry = target.rail ? links_[target] : link_to(target.id);
  entry.judges[change.scope] = change.to;
  if (change.to != health::State::kFailing) return false;
  const bool news = !entry.failing && entry.use != Use::kIsolated;
  entry.failing = true;
  entry.reason = change.reason;
  return news;
}

std::optional<RouteChange> Isolation::proposal(absl::Time now) {
  const int64_t due = due_ns_.load(std::memory_order_acquire);
  if (due == INT64_MAX || absl::ToUnixNanos(now) < due) return std::nullopt;
  std::vector<health::Change> reports;
  std::optional<RouteChange> out;
  {
    MutexLock lock(&mu_);
    for (auto& [target, link] : links_) {
      std::optional<RouteChange> c;
      if (link.failing && link.use != Use::kIsolated) {
        c = change_of(target, /*isolate=*/true);
      } else if (link.use == Use::kIsolated && now - link.since >= options_.quiet) {
        c = change_of(target, /*isolate=*/false);
      } else if (link.use == Use::kProbation && !link.failing &&
                 now - link.since >= options_.probation) {
        link.use = Use::kInUse;
        link.since = now;
        reports.push_back(report_of(
            link, health::State::kProbation,
            absl::StrCat("probation passed: in use ", absl::FormatDuration(options_.probation),
                         " without FAILING")));
      }
      if (c && (!out || *c < *out)) out = c;
    }
    refresh_due();
  }
  for (const health::Change& r : reports) report_(r);
  return out;
}

void Isolation::adopted(const RouteChange& change, absl::Time now, std::string note) {
  const auto rank = static_cast<uint32_t>(options_.rank);
  Target target;
  if (change.on_rail()) {
    if (change.a != rank) return;  // another rank's rail
    target = {true, static_cast<int>(change.b)};
  } else {
    if (change.a != rank && change.b != rank) return;
    target = {false, static_cast<int>(change.a == rank ? change.b : change.a)};
  }
  health::Change report;
  {
    MutexLock lock(&mu_);
    Link& link = target.rail ? links_[target] : link_to(target.id);
    // In use, the state people saw was the judge's.
    const health::State from =
        link.use == Use::kInUse
            ? link.judge()
            : state_of_use(link.use == Use::kIsolated, link.use == Use::kProbation);
    std::string why;
    if (change.isolates()) {
      // This end's judge may have said nothing (the peer judged the link) or stepped down.
      if (!link.failing) {
        why = target.rail ? "isolated on its FAILING, since stepped down"
                          : absl::StrCat("isolated on rank ", target.id, "'s word");
      }
      link.use = Use::kIsolated;
      link.failing = false;
    } else {
      why = absl::StrCat("back in use on probation after ",
                         absl::FormatDuration(now - link.since), " isolated");
      link.use = Use::kProbation;
      // A judge that never stepped down (a quiet time shorter than WEFT_HEALTH_RECOVER) sends
      // no new FAILING: take its word now.
      link.failing = link.judge() == health::State::kFailing;
    }
    link.since = now;
    report = report_of(link, from, std::move(why));
    if (!note.empty()) {
      absl::StrAppend(&report.reason.note, report.reason.note.empty() ? "" : "; ", note);
    }
    refresh_due();
  }
  report_(report);
}

void Isolation::refresh_due() {
  int64_t due = INT64_MAX;
  for (const auto& [target, link] : links_) {
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

health::Change Isolation::report_of(const Link& link, health::State from, std::string why) {
  health::Change c;
  c.time = absl::Now();
  c.scope = link.scope;
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
