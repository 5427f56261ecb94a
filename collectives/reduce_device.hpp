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

/// Loads every kernel above into the current device's context now, as NCCL does at its
/// init. CUDA loads kernels lazily by default (CUDA_MODULE_LOADING=LAZY), at their first
/// launch, and a load waits, holding the context's lock, until the GPU has run everything
/// queued on it: a first launch behind a stream that waits for another rank, which waits
/// the same way, never returns (two ranks on an H200 hung so, in cudaLaunchKernel). Call
/// it before queueing any wait on a stream. Without CUDA: nothing to load.
absl::Status load_reduce_kernels();

}  // namespace weft
