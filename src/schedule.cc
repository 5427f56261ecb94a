#include "collectives/collective.hpp"
#include "collectives/ring_layout.hpp"

namespace weft {

Schedule::Schedule(uint64_t epoch, std::vector<int> ring)
    : epoch_(epoch), ring_(std::move(ring)), position_(ring_.size(), -1) {
  for (size_t i = 0; i < ring_.size(); ++i) position_[ring_[i]] = static_cast<int>(i);
}

int Schedule::rank_at(int position) const {
  return ring_[ring_mod(position, static_cast<int>(ring_.size()))];
}

}  // namespace weft
