// reduce_device.hpp for a build without CUDA: every call says so.
#include "collectives/reduce_device.hpp"
#include "src/device/device.hpp"

namespace weft {

absl::Status reduce_on_device(void*, const void*, const void*, size_t, DataType, ReduceOp, void*) {
  return device::require_gpu("a reduction on the GPU");
}

absl::Status finish_average_on_device(void*, size_t, DataType, int, void*) {
  return device::require_gpu("an average on the GPU");
}

absl::Status load_reduce_kernels() { return absl::OkStatus(); }

}  // namespace weft
