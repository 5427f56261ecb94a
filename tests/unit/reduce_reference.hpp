// What the reduction tests share: the element types as the tests see them, conversions and
// operations written here independently of collectives/ (the reference every kernel is held
// to), and every kernel table this CPU can run. The f16 references use the compiler's own
// _Float16 (libgcc's soft-float conversions).
#pragma once

#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/half.hpp"
#include "collectives/reduce.hpp"
#include "collectives/reduce_kernels.hpp"
#include "weft/types.hpp"

namespace weft::reference {

using reduce_internal::ReduceTable;

// Element types as the tests see them; Half and BHalf hold raw bits.
struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};

inline constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                         DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                         DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                         DataType::kBFloat16};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
inline constexpr size_t kLengths[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 1000, 4099};

/// Calls f(std::type_identity<T>{}) with the test's element type for `type`.
template <class F>
void visit_type(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8: return f(std::type_identity<int8_t>{});
    case DataType::kUint8: return f(std::type_identity<uint8_t>{});
    case DataType::kInt32: return f(std::type_identity<int32_t>{});
    case DataType::kUint32: return f(std::type_identity<uint32_t>{});
    case DataType::kInt64: return f(std::type_identity<int64_t>{});
    case DataType::kUint64: return f(std::type_identity<uint64_t>{});
    case DataType::kFloat16: return f(std::type_identity<Half>{});
    case DataType::kFloat32: return f(std::type_identity<float>{});
    case DataType::kFloat64: return f(std::type_identity<double>{});
    case DataType::kBFloat16: return f(std::type_identity<BHalf>{});
  }
  FAIL() << "bad type";
}

// ---- Independent reference conversions -------------------------------------------------

inline float ref_f16_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
inline uint16_t ref_float_to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
inline uint16_t ref_double_to_f16(double d) { return std::bit_cast<uint16_t>(static_cast<_Float16>(d)); }
inline bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
inline bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

inline float ref_bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// float -> bf16 by comparing the dropped half with exactly one half ulp.
inline uint16_t ref_float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  uint32_t hi = u >> 16;
  const uint32_t dropped = u & 0xffff;
  if (dropped > 0x8000 || (dropped == 0x8000 && (hi & 1))) ++hi;  // carries into exponent/inf
  return static_cast<uint16_t>(hi);
}

// ---- Reference operations -----------------------------------------------------------

/// The documented float semantics: a NaN operand wins (a first), ties keep the first operand.
template <class F>
F ref_float_op(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return std::max(a, b);
    case ReduceOp::kMin:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return std::min(a, b);
  }
  return F{};
}

template <class T>
T ref_op(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // 64-bit unsigned arithmetic wraps mod 2^64; narrowing keeps the low bits (C++20).
    const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return static_cast<T>(ua + ub);
      case ReduceOp::kProd: return static_cast<T>(ua * ub);
      case ReduceOp::kMax: return a > b ? a : b;
      case ReduceOp::kMin: return a < b ? a : b;
    }
    return T{};
  } else if constexpr (std::is_same_v<T, Half>) {
    return Half{ref_float_to_f16(ref_float_op(op, ref_f16_to_float(a.bits), ref_f16_to_float(b.bits)))};
  } else if constexpr (std::is_same_v<T, BHalf>) {
    return BHalf{ref_float_to_bf16(ref_float_op(op, ref_bf16_to_float(a.bits), ref_bf16_to_float(b.bits)))};
  } else {
    return ref_float_op(op, a, b);
  }
}

/// Equal bits, or both NaN (NaN payloads from sum/prod are not part of the contract).
template <class T>
inline bool equivalent(T x, T y) {
  if (std::memcmp(&x, &y, sizeof(T)) == 0) return true;
  if constexpr (std::is_same_v<T, Half>) return f16_is_nan(x.bits) && f16_is_nan(y.bits);
  if constexpr (std::is_same_v<T, BHalf>) return bf16_is_nan(x.bits) && bf16_is_nan(y.bits);
  if constexpr (std::is_floating_point_v<T>) return std::isnan(x) && std::isnan(y);
  return false;
}

template <class T>
std::string show(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BHalf>) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%04x", v.bits);
    return buf;
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
    return buf;
  } else {
    return std::to_string(v);
  }
}


// ---- Kernels under test -------------------------------------------------------------

struct Kernels {
  std::string name;
  const ReduceTable* table;  // nullptr: go through the public reduce_fn()
  ReduceFn fn(DataType type, ReduceOp op) const {
    return table ? table->fn[static_cast<int>(type)][static_cast<int>(op)] : reduce_fn(type, op);
  }
};

inline std::vector<Kernels> all_kernels() {
  std::vector<Kernels> k = {{"reduce_fn", nullptr}, {"generic", &reduce_internal::generic_table()}};
  if (const ReduceTable* avx2 = reduce_internal::avx2_table_if_usable()) k.push_back({"avx2", avx2});
  return k;
}

/// The raw bits of a float or double, for exact comparisons (NaNs included).
inline uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
inline uint64_t bits_of(double d) { return std::bit_cast<uint64_t>(d); }

}  // namespace weft::reference
