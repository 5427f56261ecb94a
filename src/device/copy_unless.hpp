// The one kernel of the device floor: a copy that first reads a stop word (copier.hpp's
// kStop) and copies nothing when it is set. A stream memory operation cannot branch, and a
// rank whose call failed must not write its cuda_ipc window any more (src/ipc_path.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace weft::device {

/// Queues on `stream` a copy of `height` rows of `width` bytes (pitches as cudaMemcpy2D's)
/// between memory the GPU reaches, skipped if `*stop` (mapped host memory) is nonzero when it
/// runs; as wide a unit a thread as every address and pitch allows. The launch's own error.
cudaError_t copy_unless_on_device(const uint32_t* stop, void* dst, size_t dst_pitch,
                                  const void* src, size_t src_pitch, size_t width, size_t height,
                                  cudaStream_t stream);

/// Loads the kernel's every width into the current device's context now: CUDA would load
/// each at its first launch, waiting until the GPU has run everything queued, which a
/// stream waiting on a peer's word never lets happen (reduce_device.hpp's
/// load_reduce_kernels says how that hung). The first error, if any.
cudaError_t load_copy_unless_kernels();

}  // namespace weft::device
