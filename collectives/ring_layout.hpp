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

/// Segments cut into chunks of `chunk` bytes for pipelined rounds: round j carries bytes
/// [j*chunk, (j+1)*chunk) of every segment, and a segment shorter than that carries none.
struct Chunks {
  size_t chunk = 1;

  /// Rounds needed for a longest segment of `max_bytes`.
  size_t rounds(size_t max_bytes) const { return (max_bytes + chunk - 1) / chunk; }
  /// Bytes that round `round` carries of a segment of `bytes`.
  size_t bytes_in(size_t bytes, size_t round) const {
    return bytes > round * chunk ? std::min(chunk, bytes - round * chunk) : size_t{0};
  }
};

/// Ring position arithmetic that never goes negative.
inline int ring_mod(long v, int n) {
  const long m = v % n;
  return static_cast<int>(m < 0 ? m + n : m);
}

}  // namespace weft
