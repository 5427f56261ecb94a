// What a communicator's route did, for readers on other threads (the health endpoint's
// GET /route, weft health): the epoch in force, its ring, the isolated links and rails, and
// every route change with its time and the line that says what it cost. The caller's thread
// records at each change (Comm::adopt); readers take a JSON copy.
#pragma once

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/route.hpp"

namespace weft {

class RouteHistory {
 public:
  explicit RouteHistory(int rank) : rank_(rank) {}

  /// Records the route as it now is; `line` (Route::adopt's) names the change and its cost.
  void record(const Route& route, const std::string& line, absl::Time when);
  /// {"rank", "epoch", "ring", "isolated_links": [[a, b]], "isolated_rails": [[rank, rail]],
  ///  "changes": [{"time", "epoch", "change"}]}; keeps the latest kKeep changes.
  std::string json() const;

  static constexpr size_t kKeep = 256;

 private:
  struct Change {
    absl::Time time;
    uint64_t epoch;
    std::string line;
  };
  const int rank_;
  mutable absl::Mutex mu_;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> ring_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, int>> links_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int, int>> rails_ ABSL_GUARDED_BY(mu_);
  std::vector<Change> changes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft
