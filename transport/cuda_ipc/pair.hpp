// cuda_ipc's link to one rank: that rank's window as this process maps it. A window is two
// slots of a piece each (src/ipc_path.hpp): a piece numbered p lives in slot p % 2, so that a
// rank copies the next piece in while its peers may still read the last one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::transport::cuda_ipc {

class Pair {
 public:
  Pair(int peer, std::byte* window, size_t slot_bytes);

  int peer() const { return peer_; }
  /// The peer's window, as mapped here.
  std::byte* window() const { return window_; }
  /// Where piece `number` lies in the peer's window, as mapped here.
  std::byte* slot(uint32_t number) const;

 private:
  int peer_;
  std::byte* window_;
  size_t slot_bytes_;
};

}  // namespace weft::transport::cuda_ipc
