// cuda_ipc: the GPUs of one host reach each other's memory directly (peer access: NVLink
// where the GPUs have it, PCIe otherwise). It is not a byte stream like the other transports
// (transport.hpp's Pair): every rank shares a window of device memory, maps every peer's, and
// a collective's pieces are copied into the windows and read out of them with copies and the
// GPU reduction kernels, on the caller's stream (src/ipc_path.hpp). The Context is this
// rank's window and the peers' windows mapped here; every transport folder has the same
// files, and here pair.hpp is one peer's window and address.hpp what a rank publishes.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "src/device/copier.hpp"
#include "transport/cuda_ipc/address.hpp"
#include "transport/cuda_ipc/pair.hpp"

namespace weft::transport::cuda_ipc {

class Context {
 public:
  /// Shares this rank's window, two slots of `slot_bytes`, through `copier` (which owns the
  /// memory, and must outlive every use of it). Where that fails, address() says why.
  Context(device::Copier& copier, int rank, int size, size_t slot_bytes);

  /// What this rank publishes.
  const Address& address() const { return address_; }
  /// Maps every peer's window from `addresses` (by rank, this rank's own among them); an
  /// error that names the first rank whose window has no handle or cannot be mapped.
  absl::Status connect(const std::vector<Address>& addresses);
  /// Gives back this rank's window and the peers' it mapped, when the ranks chose not to use
  /// them (one could not map a window): device memory a job may want. Nothing must use them
  /// after.
  void release();
  /// `rank`'s window (this rank's own too), once connected.
  const Pair& pair(int rank) const { return pairs_[rank]; }
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  device::Copier& copier_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  std::byte* own_ = nullptr;
  Address address_;
  std::vector<Pair> pairs_;
};

}  // namespace weft::transport::cuda_ipc
