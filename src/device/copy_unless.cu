#include "src/device/copy_unless.hpp"

#include <algorithm>

namespace weft::device {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMostBlocks = 4096;

// Unit: uint4 (16 bytes) or unsigned char. Each block reads the stop word once.
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

}  // namespace

cudaError_t copy_unless_on_device(const uint32_t* stop, void* dst, size_t dst_pitch,
                                  const void* src, size_t src_pitch, size_t width, size_t height,
                                  cudaStream_t stream) {
  if (width == 0 || height == 0) return cudaSuccess;
  const bool wide = (reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                     dst_pitch | src_pitch | width) % 16 == 0;
  const size_t units = wide ? width / 16 : width;
  const size_t blocks = std::min(kMostBlocks, (units * height + kThreads - 1) / kThreads);
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  if (wide) {
    copy_unless_kernel<uint4><<<blocks, kThreads, 0, stream>>>(stop, d, dst_pitch, s, src_pitch,
                                                               units, height);
  } else {
    copy_unless_kernel<unsigned char><<<blocks, kThreads, 0, stream>>>(stop, d, dst_pitch, s,
                                                                       src_pitch, units, height);
  }
  return cudaGetLastError();
}

}  // namespace weft::device
