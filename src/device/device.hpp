// What weft knows of CUDA in this process: whether this build has it, which GPUs the process
// can use, and what kind of memory a pointer is. Built without CUDA, or run without a driver
// or a GPU, every question still has an answer and every use of a GPU a clear error; host
// buffers never need any of it, and nothing here touches CUDA until it is asked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft::device {

/// What this build has of CUDA.
struct CudaBuild {
  bool built = false;
  std::string toolkit;        ///< the toolkit's version, "13.0.88"
  std::string architectures;  ///< the GPUs the kernels are compiled for, "sm_80, sm_90, ..."
};
const CudaBuild& cuda_build();

/// The GPUs this process can use.
struct Gpus {
  int driver_version = 0;          ///< CUDA's encoding: 13000 is 13.0
  std::vector<std::string> names;  ///< one per visible device, in device order
};

/// The GPUs, or why this process can use none (built without CUDA, no driver, no GPU), in
/// words that say what to do. Asked of CUDA once; the answer is kept.
const absl::StatusOr<Gpus>& gpus();

enum class MemoryKind : uint8_t { kHost, kDevice };

/// Where `p` points: kDevice for memory a GPU owns (cudaMalloc, managed memory), kHost for
/// anything else (pinned host memory too). Asks CUDA only when this process can use a GPU:
/// without one no pointer can be a device's.
MemoryKind memory_kind(const void* p);
/// Whether either of a call's two buffers is device memory: memory_kind() of each, with one
/// check, made once, that a GPU can be used (every call asks this; without a GPU it is the
/// whole answer).
bool either_on_device(const void* a, const void* b);

/// OK when this process can use a GPU; otherwise the error for `what` (a call given device
/// memory or a CUDA stream), with the reason from gpus().
absl::Status require_gpu(const char* what);

/// Loads the device floor's own kernels (copy_unless.hpp) into the current device's context
/// now, not at their first launch (collectives/reduce_device.hpp's load_reduce_kernels says
/// why). An error where they cannot load, such as a GPU this build has no code for; OK
/// without CUDA (nothing to load).
absl::Status load_kernels();

/// One line for `weft info`: the build's CUDA and the GPUs this process sees, or why none.
std::string describe();

}  // namespace weft::device
