// How long the router takes to find a ring around isolated links at a size beyond this
// machine (issue 22): 4,096 ranks, 8 a host, 1% of the links between hosts isolated; and a
// whole epoch's route (that ring, and which links the algorithms may use). Rails do not
// change the ring (a rail's isolation moves stripes within its link), so the figures hold
// for any rail count. docs/PERFORMANCE.md records them.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include <string>

#include "src/route.hpp"
#include "src/router.hpp"

namespace weft {
namespace {

constexpr int kPerHost = 8;

// 1% of the pairs of `ranks` ranks on different hosts, drawn at random.
LinkSet one_percent_isolated(int ranks) {
  const double pairs = 0.5 * ranks * (ranks - kPerHost);
  LinkSet isolated;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> rank(0, ranks - 1);
  while (isolated.size() < static_cast<size_t>(pairs / 100)) {
    const int a = rank(rng), b = rank(rng);
    if (a / kPerHost != b / kPerHost) isolated.add(a, b);
  }
  return isolated;
}

void BM_RingAroundIsolatedLinks(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  std::vector<std::vector<int>> hosts(ranks / kPerHost);
  for (int r = 0; r < ranks; ++r) hosts[r / kPerHost].push_back(r);
  const LinkSet isolated = one_percent_isolated(ranks);
  for (auto _ : state) {
    RingSearch found = ring_avoiding(hosts, isolated);
    if (!found.ring) state.SkipWithError("no ring found");
    benchmark::DoNotOptimize(found);
  }
  state.counters["isolated_links"] = static_cast<double>(isolated.size());
}
BENCHMARK(BM_RingAroundIsolatedLinks)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond);

// A whole epoch's route, as a communicator builds it: hosts from the peers, the ring, and the
// link patterns algorithms may use.
void BM_RouteAroundIsolatedLinks(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  std::vector<PeerInfo> peers(ranks);
  for (int r = 0; r < ranks; ++r) {
    peers[r].rank = r;
    peers[r].host_id = "host" + std::to_string(r / kPerHost);
  }
  const LinkSet isolated = one_percent_isolated(ranks);
  for (auto _ : state) {
    Route route(peers, isolated);
    if (!route.usable().ring) state.SkipWithError("no ring found");
    benchmark::DoNotOptimize(route);
  }
  state.counters["isolated_links"] = static_cast<double>(isolated.size());
}
BENCHMARK(BM_RouteAroundIsolatedLinks)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace weft

BENCHMARK_MAIN();
