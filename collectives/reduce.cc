// reduce.hpp: picks a kernel table for this CPU once, and the final division of kAvg.
#include "collectives/reduce.hpp"

#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "collectives/half.hpp"
#include "collectives/reduce_kernels.hpp"

namespace weft {
namespace {

using reduce_internal::ReduceTable;

// The AVX2 table also needs F16C for its f16 kernels (every AVX2 CPU we know of has it, but
// the flags are separate). Decided once; __builtin_cpu_init() makes the check valid even if
// the first call comes from another library's static initialiser.
bool use_avx2() {
#if defined(WEFT_HAVE_AVX2_KERNELS)
  static const bool yes = [] {
    __builtin_cpu_init();
    // clang has no "f16c" for __builtin_cpu_supports; CPUID leaf 1 says it for both.
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && f16c;
  }();
  return yes;
#else
  return false;
#endif
}

const ReduceTable& table() {
  static const ReduceTable& chosen = []() -> const ReduceTable& {
    const ReduceTable* avx2 = reduce_internal::avx2_table_if_usable();
    return avx2 != nullptr ? *avx2 : reduce_internal::generic_table();
  }();
  return chosen;
}

}  // namespace

const reduce_internal::ReduceTable* reduce_internal::avx2_table_if_usable() {
#if defined(WEFT_HAVE_AVX2_KERNELS)
  if (use_avx2()) return &avx2_table();
#endif
  return nullptr;
}

namespace {

template <class T>
void divide_int(void* buf, size_t count, int nranks) {
  // C++ division truncates toward zero (-7 / 2 == -3). Divide in 64 bits: nranks may not fit
  // in an 8-bit type (int8_t(200) would be -56). nranks > 0, so no INT64_MIN / -1.
  using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  T* p = static_cast<T*>(buf);
  const W n = static_cast<W>(nranks);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<W>(p[i]) / n);
}

template <class T>
void divide_float(void* buf, size_t count, int nranks) {
  // A real division, not a multiply by 1/n: that would round twice.
  T* p = static_cast<T*>(buf);
  const T n = static_cast<T>(nranks);
  for (size_t i = 0; i < count; ++i) p[i] = p[i] / n;
}

template <float (*widen)(uint16_t), uint16_t (*narrow)(float)>
void divide_16(void* buf, size_t count, int nranks) {
  // The float quotient rounded to f16/bf16 is correctly rounded (float has >= 2p+2 bits).
  uint16_t* p = static_cast<uint16_t*>(buf);
  const float n = static_cast<float>(nranks);
  for (size_t i = 0; i < count; ++i) p[i] = narrow(widen(p[i]) / n);
}

}  // namespace

ReduceFn reduce_fn(DataType type, ReduceOp op) {
  if (!is_valid(type) || !is_valid(op)) return nullptr;
  return table().fn[static_cast<int>(type)][static_cast<int>(op)];
}

void finish_average(void* buf, size_t count, DataType type, int nranks) {
  if (nranks <= 1) return;  // 1: identity; <= 0: meaningless, leave the data alone
  switch (type) {
    case DataType::kInt8: return divide_int<int8_t>(buf, count, nranks);
    case DataType::kUint8: return divide_int<uint8_t>(buf, count, nranks);
    case DataType::kInt32: return divide_int<int32_t>(buf, count, nranks);
    case DataType::kUint32: return divide_int<uint32_t>(buf, count, nranks);
    case DataType::kInt64: return divide_int<int64_t>(buf, count, nranks);
    case DataType::kUint64: return divide_int<uint64_t>(buf, count, nranks);
    case DataType::kFloat16: return divide_16<half_to_float, float_to_half>(buf, count, nranks);
    case DataType::kFloat32: return divide_float<float>(buf, count, nranks);
    case DataType::kFloat64: return divide_float<double>(buf, count, nranks);
    case DataType::kBFloat16: return divide_16<bf16_to_float, float_to_bf16>(buf, count, nranks);
  }
  // Not a DataType enumerator: nothing to do (reduce_fn() returned nullptr for it too).
}

const char* reduce_isa() { return use_avx2() ? "avx2" : "generic"; }

}  // namespace weft
