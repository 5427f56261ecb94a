// Loading CUDA kernels before their first launch, for the .cu files that own them. CUDA
// loads a kernel lazily at its first launch (CUDA_MODULE_LOADING=LAZY, the default), and
// that load waits until the GPU has run everything queued, which a stream waiting on a
// peer's word never lets happen (collectives/reduce_device.hpp's load_reduce_kernels says
// how it hung). CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>

namespace weft::device {

/// Loads each kernel (the address of a __global__ function) into the current device's
/// context now. The first error, cleared from CUDA's last error so that the application's
/// next check does not see it.
inline cudaError_t load_functions(std::initializer_list<const void*> kernels) {
  cudaFuncAttributes attributes;
  for (const void* kernel : kernels) {
    if (const cudaError_t e = cudaFuncGetAttributes(&attributes, kernel); e != cudaSuccess) {
      cudaGetLastError();
      return e;
    }
  }
  return cudaSuccess;
}

}  // namespace weft::device
