#include "collectives/collective.hpp"
#include "collectives/ring_layout.hpp"

namespace weft {

int Schedule::position_of(int rank) const {
  for (size_t i = 0; i < ring.size(); ++i) {
    if (ring[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

int Schedule::rank_at(int position) const {
  return ring[ring_mod(position, static_cast<int>(ring.size()))];
}

}  // namespace weft
