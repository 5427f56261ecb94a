// How long the router takes to find a ring around isolated links at a size beyond this
// machine (issue 22): 4,096 ranks, 8 a host, 1% of the links between hosts isolated. Rails
// do not change the ring (a rail's isolation moves stripes within its link), so the figure
// holds for any rail count. docs/PERFORMANCE.md records it.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "src/router.hpp"

namespace weft {
namespace {

void BM_RingAroundIsolatedLinks(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const int per_host = 8;
  std::vector<std::vector<int>> hosts(ranks / per_host);
  for (int r = 0; r < ranks; ++r) hosts[r / per_host].push_back(r);
  // 1% of the pairs on different hosts, drawn at random.
  const double pairs = 0.5 * ranks * (ranks - per_host);
  LinkSet isolated;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> rank(0, ranks - 1);
  while (isolated.size() < static_cast<size_t>(pairs / 100)) {
    const int a = rank(rng), b = rank(rng);
    if (a / per_host != b / per_host) isolated.add(a, b);
  }
  for (auto _ : state) {
    RingSearch found = ring_avoiding(hosts, isolated);
    if (!found.ring) state.SkipWithError("no ring found");
    benchmark::DoNotOptimize(found);
  }
  state.counters["isolated_links"] = static_cast<double>(isolated.size());
}
BENCHMARK(BM_RingAroundIsolatedLinks)->Arg(512)->Arg(4096)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace weft

BENCHMARK_MAIN();
