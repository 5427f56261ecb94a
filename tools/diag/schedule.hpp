// The order in which `weft diag probe` measures rank pairs: a round-robin tournament, so
// that the pairs measured at once share no rank and do not slow each other down.
#pragma once

#include <utility>
#include <vector>

namespace weft::tools::diag {

/// One round: disjoint pairs (a, b) with a < b.
using Round = std::vector<std::pair<int, int>>;

/// Every pair of `ranks` ranks exactly once, in rounds where no rank plays twice: n - 1
/// rounds for an even n, n for an odd n (each rank then sits one round out). The circle
/// method: rank 0 stays put while the others rotate one place per round.
std::vector<Round> tournament(int ranks);

/// The rank that `rank` meets in `round`, or -1 when it sits the round out.
int partner(const Round& round, int rank);

}  // namespace weft::tools::diag
