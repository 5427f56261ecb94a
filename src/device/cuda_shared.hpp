// Device memory that other processes of this host map (the copier's share_memory and
// open_shared over CUDA): CUDA's virtual memory management, whose allocations export as POSIX
// descriptors (shared_fd.hpp) and are reference-counted by the driver, so that a peer's
// mapping outlives the owner's (the legacy cudaIpc handles leave that undefined). Peer access
// is granted per mapping: a GPU that cannot reach the owner's (no NVLink or PCIe peer path)
// fails to map it, and the caller stages through the host instead. The driver's entry points
// come through the runtime, so nothing links libcuda.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weft::device {

class CudaShared {
 public:
  explicit CudaShared(int device) : device_(device) {}
  ~CudaShared();  ///< unmaps and releases every allocation, ours and peers'
  CudaShared(const CudaShared&) = delete;
  CudaShared& operator=(const CudaShared&) = delete;

  /// `bytes` (rounded up to the driver's granularity) on this device, not cleared; the
  /// pointer and its handle.
  absl::StatusOr<std::pair<std::byte*, std::string>> share(size_t bytes);
  /// Maps a peer's allocation of `bytes` by its handle, readable and writable from this device.
  absl::StatusOr<std::byte*> open(std::string_view handle, size_t bytes);
  /// Unmaps and releases what share or open gave at `data` now, and closes its exported
  /// descriptor if it is ours.
  void release(std::byte* data);

 private:
  struct Driver;
  absl::Status load();
  absl::StatusOr<size_t> rounded(size_t bytes);
  // Maps `allocation` (a CUmemGenericAllocationHandle) for this device; releases it on failure.
  absl::StatusOr<std::byte*> map(unsigned long long allocation, size_t bytes);

  struct Mapping {
    unsigned long long address;  // CUdeviceptr
    size_t bytes;
    unsigned long long allocation;  // CUmemGenericAllocationHandle
    int exported = -1;              // ours: the descriptor peers take (shared_fd.hpp)
  };
  static void unmap(const Driver& driver, const Mapping& m);
  int device_;
  const Driver* driver_ = nullptr;
  std::vector<Mapping> mappings_;
};

}  // namespace weft::device
