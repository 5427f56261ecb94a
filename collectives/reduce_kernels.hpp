// Internal to the reduction kernels: the per-ISA kernel tables and the templates they are
// built from. Included by reduce_avx2.cc and reduce_generic.cc (each compiled with its own
// target flags), by reduce.cc (for the table declarations) and by the unit tests.
//
// Element semantics, identical in every table (the tests check this bit for bit):
//  * Integers wrap modulo 2^bits: sum and prod are computed in the unsigned type, so there
//    is no signed-overflow UB; max/min compare as the signed/unsigned type itself.
//  * float/double sum and prod are plain IEEE operations (round to nearest even, assuming
//    the default MXCSR). max/min propagate NaN: if a is NaN the result is a, else if b is
//    NaN it is b, else max = (a < b ? b : a), min = (b < a ? b : a). So for equal operands
//    (+0 vs -0) the first operand wins, which keeps the result a pure function of (a, b).
//  * f16 and bf16 convert both operands to float (exact), apply the float operation and
//    round back to nearest even once. Because float carries >= 2p+2 bits of the target's
//    p-bit significand (24 >= 2*11+2), the float rounding followed by the half rounding
//    gives the correctly rounded result for sum and prod (no double-rounding error).
//    NaNs come out quiet (the conversions quiet them, like F16C does).
//  * NaN payloads from sum/prod are whatever the FPU propagates; the compiler may swap the
//    operands of a commutative add/mul, so only "is NaN" is guaranteed across tables.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "collectives/reduce.hpp"
#include "weft/types.hpp"

// The element operations (apply and the f16 / bf16 conversions) run on the GPU too:
// reduce_cuda.cu builds its kernels from these same functions, so that a GPU result equals
// the host's bit for bit. (nvcc compiles that file with --fmad=false: no contraction into
// fused multiply-adds, as on the host.)
#if defined(__CUDACC__)
#define WEFT_ELEMENT_OP __host__ __device__ __forceinline__
#else
#define WEFT_ELEMENT_OP inline
#endif

namespace weft::reduce_internal {

/// One function per (type, op), indexed by the enums' values; kAvg holds the sum kernel.
struct ReduceTable {
  ReduceFn fn[kNumDataTypes][kNumReduceOps];
};

/// Kernels compiled with -mavx2 -mf16c -mfma. Only call through it when the CPU has AVX2
/// and F16C (reduce_fn() checks); on x86-64 only.
const ReduceTable& avx2_table();
/// Kernels compiled for baseline x86-64 (SSE2); safe on any CPU.
const ReduceTable& generic_table();
/// &avx2_table() when it was built (x86-64) and this CPU can run it, else nullptr. The
/// tests use it to compare the two tables.
const ReduceTable* avx2_table_if_usable();

// Everything below lives in an anonymous namespace on purpose: each .cc includes it and
// gets its own copy compiled with its own -m flags. With ordinary (vague-linkage) templates
// the linker would keep just one instantiation of, say, plain_kernel<float, kSum> for the
// whole library, possibly the AVX2 one, and the "generic" table would then SIGILL on a CPU
// without AVX2. For the same reason the kernels do not call the inline helpers in
// half.hpp (float_to_bf16 etc.) but have their own copies here, which the tests compare
// with half.hpp/half.cc exhaustively.
namespace {

/// The operation on two values of T (T = integer type, float or double).
template <class T, ReduceOp op>
WEFT_ELEMENT_OP T apply(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Unsigned arithmetic wraps by definition. Promote narrow types to unsigned int rather
    // than letting them become (signed) int, so a product can never overflow int.
    using U = std::make_unsigned_t<T>;
    using W = std::common_type_t<U, unsigned>;
    if constexpr (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
      return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) + static_cast<W>(static_cast<U>(b))));
    } else if constexpr (op == ReduceOp::kProd) {
      return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
    } else if constexpr (op == ReduceOp::kMax) {
      return a < b ? b : a;
    } else {
      return b < a ? b : a;
    }
  } else {
    if constexpr (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
      return a + b;
    } else if constexpr (op == ReduceOp::kProd) {
      return a * b;
    } else {
      // Written as selects (no branches, no calls) so the vectoriser turns it into
      // compare + blend. x != x is the NaN test (no -ffast-math anywhere in weft).
      const T r = (op == ReduceOp::kMax) ? (a < b ? b : a) : (b < a ? b : a);
      return a != a ? a : (b != b ? b : r);
    }
  }
}

/// Integer, float and double: one plain loop. It stays correct when out == a or out == b
/// (each element is read before it is written and no element depends on another). GCC
/// versions the vectorised loop on a runtime overlap check that accepts exact aliasing
/// (measured: out == a runs at full vector speed); only partial overlap, which the API
/// forbids, would take the scalar copy.
/// An element at any byte offset: a link hands over bytes wherever its buffer put them, so
/// kernels read and write through this type of alignment 1 (a packed struct: both g++ and
/// clang honour it). x86 vector loads never cared; now the compiler may not assume more.
template <class T>
struct __attribute__((packed)) Unaligned {
  T v;
};

template <class T, ReduceOp op>
void plain_kernel(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<Unaligned<T>*>(out);
  const auto* x = static_cast<const Unaligned<T>*>(a);
  const auto* y = static_cast<const Unaligned<T>*>(b);
  for (size_t i = 0; i < count; ++i) o[i].v = apply<T, op>(x[i].v, y[i].v);
}

/// bfloat16 -> float: the bf16 bits are the float's high half.
WEFT_ELEMENT_OP float bf16_widen(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

/// float -> bfloat16, round to nearest even; NaN becomes a quiet NaN (same as float_to_bf16
/// in half.hpp, repeated here so each ISA gets its own copy; see above). Written as a
/// select so it vectorises with integer shifts/adds.
WEFT_ELEMENT_OP uint16_t bf16_narrow(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(f != f ? quiet_nan : rounded);
}

/// 16-bit elements at any byte offset (see Unaligned).
using AnyU16 = Unaligned<uint16_t>;

template <ReduceOp op>
void bf16_kernel(void* out, const void* a, const void* b, size_t count) {
  AnyU16* o = static_cast<AnyU16*>(out);
  const AnyU16* x = static_cast<const AnyU16*>(a);
  const AnyU16* y = static_cast<const AnyU16*>(b);
  for (size_t i = 0; i < count; ++i) {
    o[i].v = bf16_narrow(apply<float, op>(bf16_widen(x[i].v), bf16_widen(y[i].v)));
  }
}

/// half -> float, equal to half_to_float() for every input (the tests check all 65536) but
/// branch-free, so the loops below vectorise even with plain SSE2: calling half.cc per
/// element runs at ~0.1 GB/s. Subnormals go through int -> float and a multiply by 2^-24,
/// both exact, so neither the rounding mode nor FTZ/DAZ can change the result.
WEFT_ELEMENT_OP float f16_widen(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const uint32_t normal = (em << 13) + (112u << 23);
  const uint32_t inf_nan = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x400000u : 0u);  // NaN: quiet it
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  const uint32_t mag = em < 0x400u ? subnormal : (em >= 0x7c00u ? inf_nan : normal);
  return std::bit_cast<float>(sign | mag);
}

/// float -> half, equal to float_to_half() for every input, branch-free like f16_widen().
/// A result in the subnormal range is |f| * 2^24 rounded to an integer: the scaling is
/// exact, truncation (cvttps2dq) ignores the rounding mode, and the remainder y - t is
/// exact, so round-to-nearest-even is done by hand without depending on MXCSR.
WEFT_ELEMENT_OP uint16_t f16_narrow(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal range: rebias, round the 13 dropped bits to nearest even (the carry may bump the
  // exponent). Garbage for small a, which the selects below discard.
  const uint32_t v = a - (112u << 23);
  const uint32_t normal = (v + 0xfffu + ((v >> 13) & 1u)) >> 13;
  // Clamped below 2^-14 so that y < 1024 and the cast is always defined (a select around the
  // cast instead would make GCC branch around it).
  const float y = std::bit_cast<float>(a < 0x38800000u ? a : 0x387fffffu) * 0x1p24f;
  const int32_t t = static_cast<int32_t>(y);
  const float frac = y - static_cast<float>(t);
  // Bitwise | and & rather than || and &&: no branches, so the loop stays vectorisable.
  const uint32_t q = static_cast<uint32_t>(t);
  const uint32_t round_up = static_cast<uint32_t>(frac > 0.5f) | (static_cast<uint32_t>(frac == 0.5f) & q);
  const uint32_t subnormal = q + (round_up & 1u);
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // quiet, top payload bits (like vcvtps2ph)
  uint32_t r = a < 0x38800000u ? subnormal : normal;    // below 2^-14: subnormal result
  r = a >= 0x477ff000u ? 0x7c00u : r;                   // from 65520 up: infinity
  r = a > 0x7f800000u ? nan : r;
  return static_cast<uint16_t>(sign | r);
}

/// f16 through the branch-free conversions: the generic table's kernel and the AVX2 tail.
template <ReduceOp op>
inline void f16_soft_loop(AnyU16* o, const AnyU16* x, const AnyU16* y, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    o[i].v = f16_narrow(apply<float, op>(f16_widen(x[i].v), f16_widen(y[i].v)));
  }
}

/// The generic table's f16 row (an F16 parameter of make_table() below).
struct SoftF16 {
  template <ReduceOp op>
  static void fn(void* out, const void* a, const void* b, size_t count) {
    f16_soft_loop<op>(static_cast<AnyU16*>(out), static_cast<const AnyU16*>(a),
                      static_cast<const AnyU16*>(b), count);
  }
};

/// The row of one type: sum, prod, max, min, avg (= sum). Fill::fn<op> is the kernel.
template <class Fill>
constexpr void fill_row(ReduceFn (&row)[kNumReduceOps], Fill) {
  row[static_cast<int>(ReduceOp::kSum)] = Fill::template fn<ReduceOp::kSum>;
  row[static_cast<int>(ReduceOp::kProd)] = Fill::template fn<ReduceOp::kProd>;
  row[static_cast<int>(ReduceOp::kMax)] = Fill::template fn<ReduceOp::kMax>;
  row[static_cast<int>(ReduceOp::kMin)] = Fill::template fn<ReduceOp::kMin>;
  row[static_cast<int>(ReduceOp::kAvg)] = Fill::template fn<ReduceOp::kSum>;
}

template <class T>
struct PlainRow {
  template <ReduceOp op>
  static void fn(void* out, const void* a, const void* b, size_t count) { plain_kernel<T, op>(out, a, b, count); }
};
struct Bf16Row {
  template <ReduceOp op>
  static void fn(void* out, const void* a, const void* b, size_t count) { bf16_kernel<op>(out, a, b, count); }
};

/// The whole table; F16 supplies the f16 row (ScalarF16 or an ISA-specific one, with the
/// same static template fn<op> as the rows above).
/// constexpr so the table is constant-initialised data: no load-time code runs in the AVX2
/// translation unit on a CPU that lacks AVX2.
template <class F16>
constexpr ReduceTable make_table() {
  ReduceTable t{};
  fill_row(t.fn[static_cast<int>(DataType::kInt8)], PlainRow<int8_t>{});
  fill_row(t.fn[static_cast<int>(DataType::kUint8)], PlainRow<uint8_t>{});
  fill_row(t.fn[static_cast<int>(DataType::kInt32)], PlainRow<int32_t>{});
  fill_row(t.fn[static_cast<int>(DataType::kUint32)], PlainRow<uint32_t>{});
  fill_row(t.fn[static_cast<int>(DataType::kInt64)], PlainRow<int64_t>{});
  fill_row(t.fn[static_cast<int>(DataType::kUint64)], PlainRow<uint64_t>{});
  fill_row(t.fn[static_cast<int>(DataType::kFloat16)], F16{});
  fill_row(t.fn[static_cast<int>(DataType::kFloat32)], PlainRow<float>{});
  fill_row(t.fn[static_cast<int>(DataType::kFloat64)], PlainRow<double>{});
  fill_row(t.fn[static_cast<int>(DataType::kBFloat16)], Bf16Row{});
  return t;
}

}  // namespace
}  // namespace weft::reduce_internal
