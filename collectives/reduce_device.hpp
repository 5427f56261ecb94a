// Element-wise reduction kernels for GPU memory: the same (type, op) table and the same
// element semantics as the host kernels (reduce_kernels.hpp says them; the GPU tests compare
// the two bit for bit), run as CUDA kernels ordered on a stream.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "weft/types.hpp"

namespace weft {

/// out[i] = a[i] op b[i] for i < count, on the GPU, ordered on `stream` (a cudaStream_t;
/// nullptr is the default stream). The pointers are device memory, or host memory the GPU
/// can reach; `out` may alias `a` or `b` exactly. Returns once the kernel is queued: an
/// error is a bad argument, a build without CUDA or a launch CUDA refused. kAvg reduces as
/// kSum; finish_average_on_device() divides at the end.
absl::Status reduce_on_device(void* out, const void* a, const void* b, size_t count, DataType type,
                              ReduceOp op, void* stream);

/// buf[i] /= nranks on the GPU, as finish_average() does it on the host.
absl::Status finish_average_on_device(void* buf, size_t count, DataType type, int nranks,
                                      void* stream);

}  // namespace weft
