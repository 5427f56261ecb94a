// How a vector is cut into one segment per rank for ring algorithms.
#pragma once

#include <algorithm>
#include <cstddef>

namespace weft {

/// Segment i starts at i*base + min(i, extra) elements and holds base (+1 for the first
/// `extra` segments) elements: counts that do not divide by the rank count spread the
/// remainder over the first segments. `uniform` gives every segment the same length, as
/// reduce_scatter's per-rank blocks have.
struct Segments {
  size_t base = 0;
  size_t extra = 0;

  static Segments split(size_t count, int n) {
    return {count / static_cast<size_t>(n), count % static_cast<size_t>(n)};
  }
  static Segments uniform(size_t count_each) { return {count_each, 0}; }

  size_t offset(int i) const {
    const size_t u = static_cast<size_t>(i);
    return u * base + std::min(u, extra);
  }
  size_t length(int i) const { return base + (static_cast<size_t>(i) < extra ? 1 : 0); }
};

/// Ring position arithmetic that never goes negative.
inline int ring_mod(long v, int n) {
  const long m = v % n;
  return static_cast<int>(m < 0 ? m + n : m);
}

}  // namespace weft
