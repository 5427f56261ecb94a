#include "tools/diag/schedule.hpp"

#include <algorithm>

namespace weft::tools::diag {

std::vector<Round> tournament(int ranks) {
  if (ranks < 2) return {};
  // An odd count gets a phantom rank; whoever meets it sits the round out.
  const int seats = ranks + (ranks % 2);
  std::vector<int> circle(seats);
  for (int i = 0; i < seats; ++i) circle[i] = i;
  std::vector<Round> rounds;
  for (int r = 0; r < seats - 1; ++r) {
    Round round;
    for (int i = 0; i < seats / 2; ++i) {
      const int a = circle[i];
      const int b = circle[seats - 1 - i];
      if (a < ranks && b < ranks) round.emplace_back(std::min(a, b), std::max(a, b));
    }
    std::sort(round.begin(), round.end());
    rounds.push_back(std::move(round));
    // Seat 0 stays; seats 1..n-1 move one place round the circle.
    std::rotate(circle.begin() + 1, circle.end() - 1, circle.end());
  }
  return rounds;
}

int partner(const Round& round, int rank) {
  for (const auto& [a, b] : round) {
    if (a == rank) return b;
    if (b == rank) return a;
  }
  return -1;
}

}  // namespace weft::tools::diag
