// reduce_device.hpp as CUDA kernels, one per (type, op). Elements move 16 bytes at a time
// where the three pointers allow it (and one at a time for the tail and otherwise), in a
// grid-stride loop over a grid that fills every SM once.
//
// The element operations are reduce_kernels.hpp's own, compiled for the device too, so that a
// GPU result equals the host's bit for bit: integers wrap, float and double round to nearest
// (this file is compiled with --fmad=false, so nothing is contracted into a fused
// multiply-add, and nvcc flushes no subnormals without --use_fast_math, which weft never
// sets), max and min propagate NaN the same way, f16 and bf16 go through float.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "collectives/reduce_device.hpp"
#include "collectives/reduce_kernels.hpp"
#include "src/device/device.hpp"
#include "src/device/load_functions.hpp"

namespace weft {
namespace {

using reduce_internal::apply;
using reduce_internal::bf16_narrow;
using reduce_internal::bf16_widen;
using reduce_internal::f16_narrow;
using reduce_internal::f16_widen;

// How each type is stored, and its operation on stored values.
template <DataType dt> struct Stored;
template <> struct Stored<DataType::kInt8> { using type = int8_t; };
template <> struct Stored<DataType::kUint8> { using type = uint8_t; };
template <> struct Stored<DataType::kInt32> { using type = int32_t; };
template <> struct Stored<DataType::kUint32> { using type = uint32_t; };
template <> struct Stored<DataType::kInt64> { using type = int64_t; };
template <> struct Stored<DataType::kUint64> { using type = uint64_t; };
template <> struct Stored<DataType::kFloat16> { using type = uint16_t; };
template <> struct Stored<DataType::kFloat32> { using type = float; };
template <> struct Stored<DataType::kFloat64> { using type = double; };
template <> struct Stored<DataType::kBFloat16> { using type = uint16_t; };

template <DataType dt, ReduceOp op, class S = typename Stored<dt>::type>
__device__ __forceinline__ S combine(S a, S b) {
  if constexpr (dt == DataType::kFloat16) {
    return f16_narrow(apply<float, op>(f16_widen(a), f16_widen(b)));
  } else if constexpr (dt == DataType::kBFloat16) {
    return bf16_narrow(apply<float, op>(bf16_widen(a), bf16_widen(b)));
  } else {
    return apply<S, op>(a, b);
  }
}

// buf / n as finish_average() divides: integers in 64 bits toward zero, floats by a real
// division, f16 and bf16 in float rounded once.
template <DataType dt, class S = typename Stored<dt>::type>
__device__ __forceinline__ S divide(S x, int n) {
  if constexpr (dt == DataType::kFloat16) {
    return f16_narrow(f16_widen(x) / static_cast<float>(n));
  } else if constexpr (dt == DataType::kBFloat16) {
    return bf16_narrow(bf16_widen(x) / static_cast<float>(n));
  } else if constexpr (std::is_floating_point_v<S>) {
    return x / static_cast<S>(n);  // IEEE division: nvcc's default -prec-div=true
  } else {
    using W = std::conditional_t<std::is_signed_v<S>, int64_t, uint64_t>;
    return static_cast<S>(static_cast<W>(x) / static_cast<W>(n));
  }
}

constexpr int kThreads = 256;

template <DataType dt, ReduceOp op>
__global__ void reduce_kernel(void* out, const void* a, const void* b, size_t count, bool wide) {
  using S = typename Stored<dt>::type;
  constexpr size_t kPerVector = sizeof(uint4) / sizeof(S);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (wide) {
    const size_t vectors = count / kPerVector;
    auto* o = static_cast<uint4*>(out);
    const auto* x = static_cast<const uint4*>(a);
    const auto* y = static_cast<const uint4*>(b);
    for (size_t v = first; v < vectors; v += stride) {
      const uint4 xv = x[v], yv = y[v];
      uint4 r;
      const S* xs = reinterpret_cast<const S*>(&xv);
      const S* ys = reinterpret_cast<const S*>(&yv);
      S* rs = reinterpret_cast<S*>(&r);
#pragma unroll
      for (size_t k = 0; k < kPerVector; ++k) rs[k] = combine<dt, op>(xs[k], ys[k]);
      o[v] = r;
    }
    done = vectors * kPerVector;
  }
  S* o = static_cast<S*>(out);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  for (size_t i = done + first; i < count; i += stride) o[i] = combine<dt, op>(x[i], y[i]);
}

template <DataType dt>
__global__ void divide_kernel(void* buf, size_t count, int nranks) {
  using S = typename Stored<dt>::type;
  S* p = static_cast<S*>(buf);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    p[i] = divide<dt>(p[i], nranks);
  }
}

// Blocks enough to fill every SM of the current device (asked once per device), fewer for a
// small count.
unsigned blocks_for(size_t items) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> sms[kMaxDevices] = {};  // ranks on threads launch at once
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) dev = 0;
  int n = sms[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      n = 1;
    }
    cudaGetLastError();  // a failed question here is not the launch's error
    sms[dev].store(n, std::memory_order_relaxed);
  }
  const size_t full = static_cast<size_t>(n) * (2048 / kThreads);
  const size_t wanted = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < full ? (wanted > 0 ? wanted : 1) : full);
}

absl::Status launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA refused ", what, ": ", cudaGetErrorName(e), ": ",
                                          cudaGetErrorString(e)));
}

bool aligned(const void* p, size_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

template <DataType dt, ReduceOp op>
absl::Status launch(void* out, const void* a, const void* b, size_t count, cudaStream_t stream) {
  using S = typename Stored<dt>::type;
  const bool wide = aligned(out, 16) && aligned(a, 16) && aligned(b, 16);
  constexpr size_t kPerVector = sizeof(uint4) / sizeof(S);
  const size_t items = wide ? count / kPerVector + count % kPerVector : count;
  reduce_kernel<dt, op><<<blocks_for(items), kThreads, 0, stream>>>(out, a, b, count, wide);
  return launched("the reduction kernel");
}

template <DataType dt>
absl::Status launch_op(ReduceOp op, void* out, const void* a, const void* b, size_t count,
                       cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return launch<dt, ReduceOp::kSum>(out, a, b, count, stream);
    case ReduceOp::kProd: return launch<dt, ReduceOp::kProd>(out, a, b, count, stream);
    case ReduceOp::kMax: return launch<dt, ReduceOp::kMax>(out, a, b, count, stream);
    case ReduceOp::kMin: return launch<dt, ReduceOp::kMin>(out, a, b, count, stream);
  }
  return absl::InvalidArgumentError("not a reduction operator");
}

template <DataType dt>
absl::Status launch_divide(void* buf, size_t count, int nranks, cudaStream_t stream) {
  divide_kernel<dt><<<blocks_for(count), kThreads, 0, stream>>>(buf, count, nranks);
  return launched("the average kernel");
}

// Calls f.template operator()<dt>() for the runtime `type`.
template <class F>
absl::Status for_type(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8: return f.template operator()<DataType::kInt8>();
    case DataType::kUint8: return f.template operator()<DataType::kUint8>();
    case DataType::kInt32: return f.template operator()<DataType::kInt32>();
    case DataType::kUint32: return f.template operator()<DataType::kUint32>();
    case DataType::kInt64: return f.template operator()<DataType::kInt64>();
    case DataType::kUint64: return f.template operator()<DataType::kUint64>();
    case DataType::kFloat16: return f.template operator()<DataType::kFloat16>();
    case DataType::kFloat32: return f.template operator()<DataType::kFloat32>();
    case DataType::kFloat64: return f.template operator()<DataType::kFloat64>();
    case DataType::kBFloat16: return f.template operator()<DataType::kBFloat16>();
  }
  return absl::InvalidArgumentError("not a data type");
}

absl::Status check(const void* p, DataType type, const char* what) {
  if (!is_valid(type)) return absl::InvalidArgumentError("not a data type");
  if (!aligned(p, size_of(type))) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is not aligned to its ", size_of(type), "-byte elements (a GPU cannot load it)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status reduce_on_device(void* out, const void* a, const void* b, size_t count, DataType type,
                              ReduceOp op, void* stream) {
  if (!is_valid(op)) return absl::InvalidArgumentError("not a reduction operator");
  for (const auto& [p, what] : {std::pair<const void*, const char*>{out, "the output"},
                                {a, "the first input"}, {b, "the second input"}}) {
    if (auto s = check(p, type, what); !s.ok()) return s;
  }
  if (count == 0) return absl::OkStatus();
  if (auto s = device::require_gpu("a reduction on the GPU"); !s.ok()) return s;
  auto* s = static_cast<cudaStream_t>(stream);
  return for_type(type, [&]<DataType dt>() { return launch_op<dt>(op, out, a, b, count, s); });
}

absl::Status finish_average_on_device(void* buf, size_t count, DataType type, int nranks,
                                      void* stream) {
  if (auto s = check(buf, type, "the buffer"); !s.ok()) return s;
  if (nranks <= 1 || count == 0) return absl::OkStatus();
  if (auto s = device::require_gpu("an average on the GPU"); !s.ok()) return s;
  auto* s = static_cast<cudaStream_t>(stream);
  return for_type(type, [&]<DataType dt>() { return launch_divide<dt>(buf, count, nranks, s); });
}

absl::Status load_reduce_kernels() {
  for (int t = 0; t < kNumDataTypes; ++t) {
    auto s = for_type(static_cast<DataType>(t), []<DataType dt>() -> absl::Status {
      const cudaError_t e = device::load_functions(
          {reinterpret_cast<const void*>(&reduce_kernel<dt, ReduceOp::kSum>),
           reinterpret_cast<const void*>(&reduce_kernel<dt, ReduceOp::kProd>),
           reinterpret_cast<const void*>(&reduce_kernel<dt, ReduceOp::kMax>),
           reinterpret_cast<const void*>(&reduce_kernel<dt, ReduceOp::kMin>),
           reinterpret_cast<const void*>(&divide_kernel<dt>)});
      if (e == cudaSuccess) return absl::OkStatus();
      return absl::InternalError(absl::StrCat(
          "loading the reduction kernels for ", name_of(dt), ": ", cudaGetErrorName(e), ": ",
          cudaGetErrorString(e), " (was weft built for this GPU's architecture? weft info "
          "says which)"));
    });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace weft
