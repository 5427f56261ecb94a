#include "src/route.hpp"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/algorithm.hpp"
#include "collectives/call_check.hpp"

namespace weft {

Route::Route(const std::vector<PeerInfo>& peers, LinkSet isolated)
    : hosts_(ranks_by_host(peers)), isolated_(std::move(isolated)) {
  // Rank order stands in where no ring avoids what starts isolated.
  std::vector<int> by_rank(peers.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  schedule_ = Schedule(/*epoch=*/0, std::move(by_rank));
  reroute(/*epoch=*/0);
}

std::string Route::adopt(const RouteChange& change) {
  const int a = static_cast<int>(change.a), b = static_cast<int>(change.b);
  if (change.on_rail()) {
    const bool changed = change.isolates() ? rails_.insert({a, b}).second : rails_.erase({a, b}) > 0;
    if (!changed) return "";
    schedule_ = Schedule(schedule_.epoch() + 1, schedule_.ring());
    return absl::StrCat("route epoch ", epoch(), ": ", change.describe(), "; ", rails_.size(),
                        " rail(s) isolated; rank ", a, "'s links ",
                        change.isolates() ? "stripe over its other rails (a link with no other "
                                            "keeps it)"
                                          : "stripe over it again",
                        "; ring unchanged");
  }
  const bool changed = change.isolates() ? isolated_.add(a, b) : isolated_.remove(a, b);
  if (!changed) return "";
  const std::vector<int> before = schedule_.ring();
  reroute(schedule_.epoch() + 1);
  std::string line = absl::StrCat("route epoch ", epoch(), ": ", change.describe(), "; ",
                                  isolated_.size(), " link(s) isolated; ring ",
                                  absl::StrJoin(schedule_.ring(), " "));
  if (!usable_.ring) {
    absl::StrAppend(&line, " (no ring keeps hosts together around the isolated links: the "
                           "ring still crosses one, at its full cost)");
  } else if (schedule_.ring() == before) {
    absl::StrAppend(&line, " (unchanged)");
  } else if (hosts_.size() > 1 && crossings_ > hosts_.size()) {
    absl::StrAppend(&line, ": no relay, every rail; a host's ranks are apart, so the ring "
                           "crosses the network ", crossings_, " times instead of ",
                    hosts_.size());
  } else {
    absl::StrAppend(&line, ": no relay, every rail, the fault-free ring's bandwidth");
  }
  if (!usable_.rounds) {
    absl::StrAppend(&line, "; small messages take the ring (recursive doubling would cross an "
                           "isolated link), the call check still does");
  }
  return line;
}

void Route::reroute(uint64_t epoch) {
  RingSearch found = ring_avoiding(hosts_, isolated_);
  usable_.ring = found.ring.has_value();
  // Without a ring that avoids every isolated link, the ring keeps hosts together as before.
  std::vector<int> ring = found.ring ? *std::move(found.ring) : schedule_.ring();
  schedule_ = Schedule(epoch, std::move(ring));
  const int n = static_cast<int>(schedule_.ring().size());
  // How often the ring goes from one host to another, counted on the ring itself (the search's
  // pieces are not that: a search that placed ranks one by one has a piece per rank).
  std::vector<size_t> host_of(n);
  for (size_t h = 0; h < hosts_.size(); ++h) {
    for (int r : hosts_[h]) {
      if (r >= 0 && r < n) host_of[r] = h;
    }
  }
  crossings_ = 0;
  for (int i = 0; i < n && hosts_.size() > 1; ++i) {
    crossings_ += host_of[schedule_.ring()[i]] != host_of[schedule_.ring()[(i + 1) % n]];
  }
  usable_.rounds = true;
  isolated_.for_each([&](int a, int b) {
    if (rounds_link(schedule_.position_of(a), schedule_.position_of(b), n)) usable_.rounds = false;
  });
  usable_.every_pair = isolated_.size() == 0;
}

}  // namespace weft
