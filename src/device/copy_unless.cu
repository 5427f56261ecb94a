#include "src/device/copy_unless.hpp"

#include <algorithm>

#include "src/device/load_functions.hpp"

namespace weft::device {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMostBlocks = 4096;

// Unit: 16, 8, 4, 2 or 1 bytes, a thread's share of one step. Each block reads the stop word
// once.
template <typename Unit>
__global__ void copy_unless_kernel(const volatile uint32_t* stop, char* dst, size_t dst_pitch,
                                   const char* src, size_t src_pitch, size_t units_per_row,
                                   size_t rows) {
  __shared__ bool skip;
  if (threadIdx.x == 0) skip = *stop != 0;
  __syncthreads();
  if (skip) return;
  const size_t total = units_per_row * rows;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < total;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t row = i / units_per_row, col = i % units_per_row;
    reinterpret_cast<Unit*>(dst + row * dst_pitch)[col] =
        reinterpret_cast<const Unit*>(src + row * src_pitch)[col];
  }
}

// Launches the kernel for Unit; cudaLaunchKernel returns this launch's own error, not one an
// earlier call of the application's left behind.
template <typename Unit>
cudaError_t launch(const uint32_t* stop, char* dst, size_t dst_pitch, const char* src,
                   size_t src_pitch, size_t width, size_t height, cudaStream_t stream) {
  const volatile uint32_t* word = stop;
  size_t units = width / sizeof(Unit);
  const size_t blocks = std::min(kMostBlocks, (units * height + kThreads - 1) / kThreads);
  void* args[] = {&word, &dst, &dst_pitch, &src, &src_pitch, &units, &height};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&copy_unless_kernel<Unit>),
                          dim3(static_cast<unsigned>(blocks)), dim3(kThreads), args, 0, stream);
}

}  // namespace

cudaError_t copy_unless_on_device(const uint32_t* stop, void* dst, size_t dst_pitch,
                                  const void* src, size_t src_pitch, size_t width, size_t height,
                                  cudaStream_t stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  // The widest unit every address, pitch and width allows: 16 bytes a thread where they are
  // aligned, as in most calls; a row of floats 4.
  const uintptr_t all = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                        dst_pitch | src_pitch | width;
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  if (all % 16 == 0) return launch<uint4>(stop, d, dst_pitch, s, src_pitch, width, height, stream);
  if (all % 8 == 0) return launch<uint2>(stop, d, dst_pitch, s, src_pitch, width, height, stream);
  if (all % 4 == 0) return launch<uint32_t>(stop, d, dst_pitch, s, src_pitch, width, height, stream);
  if (all % 2 == 0) return launch<uint16_t>(stop, d, dst_pitch, s, src_pitch, width, height, stream);
  return launch<unsigned char>(stop, d, dst_pitch, s, src_pitch, width, height, stream);
}

cudaError_t load_copy_unless_kernels() {
  return load_functions({reinterpret_cast<const void*>(&copy_unless_kernel<uint4>),
                         reinterpret_cast<const void*>(&copy_unless_kernel<uint2>),
                         reinterpret_cast<const void*>(&copy_unless_kernel<uint32_t>),
                         reinterpret_cast<const void*>(&copy_unless_kernel<uint16_t>),
                         reinterpret_cast<const void*>(&copy_unless_kernel<unsigned char>)});
}

}  // namespace weft::device
