#include "transport/cuda_ipc/pair.hpp"

namespace weft::transport::cuda_ipc {

Pair::Pair(int peer, std::byte* window, size_t slot_bytes)
    : peer_(peer), window_(window), slot_bytes_(slot_bytes) {}

std::byte* Pair::slot(uint32_t number) const { return window_ + (number % 2) * slot_bytes_; }

}  // namespace weft::transport::cuda_ipc
