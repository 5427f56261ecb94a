// Device memory for the GPU tests, freed when it goes; and the check every CUDA call gets.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>

#define WEFT_CUDA_OK(call)                                                        \
  do {                                                                            \
    const cudaError_t e_ = (call);                                                \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorString(e_);        \
  } while (0)

namespace weft::gpu_test {

class GpuBuffer {
 public:
  explicit GpuBuffer(size_t bytes) {
    if (cudaMalloc(&p_, bytes > 0 ? bytes : 1) != cudaSuccess) p_ = nullptr;
  }
  ~GpuBuffer() { cudaFree(p_); }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  std::byte* get() const { return static_cast<std::byte*>(p_); }
  bool ok() const { return p_ != nullptr; }

 private:
  void* p_ = nullptr;
};

}  // namespace weft::gpu_test
