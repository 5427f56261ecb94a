// Reduction kernels (collectives/reduce.hpp) and the f16/bf16 conversions (collectives/half.hpp).
// Every kernel table this CPU can run is checked against a scalar reference written here,
// independently of the kernels; the f16 conversions are checked against g++'s _Float16
// (libgcc's soft-float conversions) and, when the CPU has it, against F16C.
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

namespace weft {

// gtest prints parameters with this (found by ADL, so not in the anonymous namespace).
void PrintTo(DataType type, std::ostream* os) { *os << name_of(type); }

namespace {

using reduce_internal::ReduceTable;

// Element types as the tests see them; Half and BHalf hold raw bits.
struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32, DataType::kUint32,
                                  DataType::kInt64,   DataType::kUint64,  DataType::kFloat16,
                                  DataType::kFloat32, DataType::kFloat64, DataType::kBFloat16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
constexpr size_t kLengths[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 1000, 4099};

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

float ref_f16_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
uint16_t ref_float_to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
uint16_t ref_double_to_f16(double d) { return std::bit_cast<uint16_t>(static_cast<_Float16>(d)); }
bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

float ref_bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// float -> bf16 by comparing the dropped half with exactly one half ulp.
uint16_t ref_float_to_bf16(float f) {
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
bool equivalent(T x, T y) {
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

// ---- Inputs -------------------------------------------------------------------------

template <class T>
T random_value(std::mt19937_64& rng) {
  const uint64_t r = rng();
  const int kind = static_cast<int>(r % 10);  // 0..5 moderate, 6..7 raw bits, 8..9 specials
  const uint64_t bits = rng();
  if constexpr (std::is_integral_v<T>) {
    static const T specials[] = {0, 1, static_cast<T>(-1), std::numeric_limits<T>::min(),
                                 std::numeric_limits<T>::max(), static_cast<T>(std::numeric_limits<T>::max() - 1)};
    if (kind >= 8) return specials[bits % std::size(specials)];
    if (kind < 6) return static_cast<T>(static_cast<int64_t>(bits % 201) - 100);
    return static_cast<T>(bits);
  } else {
    // Moderate values: [-8, 8) in steps of 1/64, so sums and products of halves stay finite
    // and exercise rounding; raw bits give NaNs, infinities, subnormals and huge values.
    const double moderate = static_cast<double>(static_cast<int64_t>(bits % 1024) - 512) / 64.0 +
                            ((bits >> 20) % 7) * std::ldexp(1.0, -12);
    if constexpr (std::is_same_v<T, Half>) {
      static const uint16_t specials[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7d23,
                                          0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0x3c01};
      if (kind >= 8) return Half{specials[bits % std::size(specials)]};
      if (kind >= 6) return Half{static_cast<uint16_t>(bits)};
      return Half{ref_double_to_f16(moderate)};
    } else if constexpr (std::is_same_v<T, BHalf>) {
      static const uint16_t specials[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x7fa3,
                                          0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0x3f81};
      if (kind >= 8) return BHalf{specials[bits % std::size(specials)]};
      if (kind >= 6) return BHalf{static_cast<uint16_t>(bits)};
      return BHalf{ref_float_to_bf16(static_cast<float>(moderate))};
    } else {
      using L = std::numeric_limits<T>;
      static const T specials[] = {T(0), -T(0), L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN(),
                                   L::signaling_NaN(), L::min(), L::denorm_min(), -L::denorm_min(), L::max(),
                                   L::lowest(), T(1), T(-1)};
      if (kind >= 8) return specials[bits % std::size(specials)];
      if (kind >= 6) {
        using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
        return std::bit_cast<T>(static_cast<U>(bits));
      }
      return static_cast<T>(moderate);
    }
  }
}

template <class T>
std::vector<T> random_vector(size_t n, std::mt19937_64& rng) {
  std::vector<T> v(n);
  for (T& x : v) x = random_value<T>(rng);
  return v;
}

// ---- Kernels under test -------------------------------------------------------------

struct Kernels {
  std::string name;
  const ReduceTable* table;  // nullptr: go through the public reduce_fn()
  ReduceFn fn(DataType type, ReduceOp op) const {
    return table ? table->fn[static_cast<int>(type)][static_cast<int>(op)] : reduce_fn(type, op);
  }
};

std::vector<Kernels> all_kernels() {
  std::vector<Kernels> k = {{"reduce_fn", nullptr}, {"generic", &reduce_internal::generic_table()}};
  if (const ReduceTable* avx2 = reduce_internal::avx2_table_if_usable()) k.push_back({"avx2", avx2});
  return k;
}

/// Runs fn over a, b (at an element offset, to test unaligned starts) and checks every
/// element against the reference. Reports at most a few mismatches.
template <class T>
void check_against_reference(const Kernels& k, DataType type, ReduceOp op, const std::vector<T>& a,
                             const std::vector<T>& b, size_t offset) {
  const size_t n = a.size() - offset;
  ReduceFn fn = k.fn(type, op);
  ASSERT_NE(fn, nullptr);
  std::vector<T> out(a.size() + 1);
  fn(out.data() + offset, a.data() + offset, b.data() + offset, n);
  int bad = 0;
  for (size_t i = 0; i < n && bad < 3; ++i) {
    const T want = ref_op(op, a[offset + i], b[offset + i]);
    const T got = out[offset + i];
    if (!equivalent(got, want)) {
      ++bad;
      ADD_FAILURE() << k.name << " " << name_of(type) << " " << name_of(op) << " n=" << n << " offset=" << offset
                    << " i=" << i << ": " << show(a[offset + i]) << " op " << show(b[offset + i]) << " gave "
                    << show(got) << ", want " << show(want);
    }
  }
}

class ReduceTypeTest : public testing::TestWithParam<DataType> {};

TEST_P(ReduceTypeTest, EveryOpAndLengthMatchesReference) {
  const DataType type = GetParam();
  visit_type(type, [&]<class T>(std::type_identity<T>) {
    std::mt19937_64 rng(1234 + static_cast<int>(type));
    for (const Kernels& k : all_kernels()) {
      for (ReduceOp op : kAllOps) {
        for (size_t len : kLengths) {
          for (size_t offset : {size_t{0}, size_t{1}}) {
            const std::vector<T> a = random_vector<T>(len + offset, rng);
            const std::vector<T> b = random_vector<T>(len + offset, rng);
            check_against_reference(k, type, op, a, b, offset);
          }
        }
      }
    }
  });
}

TEST_P(ReduceTypeTest, OutputMayAliasEitherInput) {
  const DataType type = GetParam();
  visit_type(type, [&]<class T>(std::type_identity<T>) {
    std::mt19937_64 rng(99 + static_cast<int>(type));
    for (const Kernels& k : all_kernels()) {
      for (ReduceOp op : kAllOps) {
        for (size_t len : {size_t{1}, size_t{17}, size_t{1000}, size_t{4099}}) {
          const std::vector<T> a = random_vector<T>(len, rng);
          const std::vector<T> b = random_vector<T>(len, rng);
          ReduceFn fn = k.fn(type, op);
          std::vector<T> out_a = a, out_b = b, out_ab = a;
          fn(out_a.data(), out_a.data(), b.data(), len);     // out == a
          fn(out_b.data(), a.data(), out_b.data(), len);     // out == b
          fn(out_ab.data(), out_ab.data(), out_ab.data(), len);  // out == a == b
          for (size_t i = 0; i < len; ++i) {
            const T want = ref_op(op, a[i], b[i]);
            ASSERT_TRUE(equivalent(out_a[i], want)) << k.name << " out==a " << name_of(op) << " i=" << i;
            ASSERT_TRUE(equivalent(out_b[i], want)) << k.name << " out==b " << name_of(op) << " i=" << i;
            ASSERT_TRUE(equivalent(out_ab[i], ref_op(op, a[i], a[i])))
                << k.name << " out==a==b " << name_of(op) << " i=" << i;
          }
        }
      }
    }
  });
}

// The generic and AVX2 tables must agree bit for bit; the only latitude is the payload of a
// NaN produced by sum/prod (the compiler may swap commutative operands). max/min select an
// input (f16/bf16: its quieted float round trip), so they must match exactly, NaNs included.
TEST_P(ReduceTypeTest, GenericAndAvx2TablesAgree) {
  const ReduceTable* avx2 = reduce_internal::avx2_table_if_usable();
  if (avx2 == nullptr) GTEST_SKIP() << "CPU lacks AVX2/F16C (or not x86-64)";
  const ReduceTable& generic = reduce_internal::generic_table();
  const DataType type = GetParam();
  visit_type(type, [&]<class T>(std::type_identity<T>) {
    std::mt19937_64 rng(7 + static_cast<int>(type));
    for (ReduceOp op : kAllOps) {
      const bool selects = op == ReduceOp::kMax || op == ReduceOp::kMin;
      for (size_t len : {size_t{33}, size_t{4099}, size_t{65536 + 5}}) {
        const std::vector<T> a = random_vector<T>(len, rng);
        const std::vector<T> b = random_vector<T>(len, rng);
        std::vector<T> out_g(len), out_v(len);
        generic.fn[static_cast<int>(type)][static_cast<int>(op)](out_g.data(), a.data(), b.data(), len);
        avx2->fn[static_cast<int>(type)][static_cast<int>(op)](out_v.data(), a.data(), b.data(), len);
        for (size_t i = 0; i < len; ++i) {
          const bool ok = selects ? std::memcmp(&out_g[i], &out_v[i], sizeof(T)) == 0 : equivalent(out_g[i], out_v[i]);
          ASSERT_TRUE(ok) << name_of(op) << " i=" << i << ": " << show(a[i]) << ", " << show(b[i])
                          << ": generic " << show(out_g[i]) << " avx2 " << show(out_v[i]);
        }
      }
    }
  });
}

TEST_P(ReduceTypeTest, FinishAverageDividesInTheTypesArithmetic) {
  const DataType type = GetParam();
  visit_type(type, [&]<class T>(std::type_identity<T>) {
    std::mt19937_64 rng(55 + static_cast<int>(type));
    const std::vector<T> in = random_vector<T>(1001, rng);
    for (int nranks : {1, 2, 3, 5}) {
      std::vector<T> buf = in;
      finish_average(buf.data(), buf.size(), type, nranks);
      for (size_t i = 0; i < in.size(); ++i) {
        T want;
        if constexpr (std::is_integral_v<T>) {
          // C++ division truncates toward zero: -7 / 2 == -3.
          if constexpr (std::is_signed_v<T>) want = static_cast<T>(static_cast<int64_t>(in[i]) / nranks);
          else want = static_cast<T>(static_cast<uint64_t>(in[i]) / static_cast<uint64_t>(nranks));
        } else if constexpr (std::is_same_v<T, Half>) {
          // A half divided in double and rounded once is correctly rounded.
          want = Half{ref_double_to_f16(static_cast<double>(ref_f16_to_float(in[i].bits)) / nranks)};
        } else if constexpr (std::is_same_v<T, BHalf>) {
          want = BHalf{ref_float_to_bf16(ref_bf16_to_float(in[i].bits) / static_cast<float>(nranks))};
        } else {
          want = in[i] / static_cast<T>(nranks);
        }
        ASSERT_TRUE(equivalent(buf[i], want)) << "nranks=" << nranks << " i=" << i << ": " << show(in[i]) << " gave "
                                              << show(buf[i]) << ", want " << show(want);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, ReduceTypeTest, testing::ValuesIn(kAllTypes),
                         [](const testing::TestParamInfo<DataType>& info) { return std::string(name_of(info.param)); });

// ---- Specific behaviour ------------------------------------------------------------

/// Runs (type, op) on `len` copies of the pair (a, b) with every table; returns each result.
template <class T>
std::vector<T> run_pair(DataType type, ReduceOp op, T a, T b, size_t len = 37) {
  std::vector<T> results;
  for (const Kernels& k : all_kernels()) {
    std::vector<T> va(len, a), vb(len, b), out(len);
    k.fn(type, op)(out.data(), va.data(), vb.data(), len);
    for (size_t i = 1; i < len; ++i) EXPECT_EQ(std::memcmp(&out[i], &out[0], sizeof(T)), 0) << k.name;
    results.push_back(out[0]);
  }
  return results;
}

#define EXPECT_ALL_EQ(results, want)                              \
  for (const auto& r : (results)) {                               \
    EXPECT_EQ(r, want);                                           \
  }

TEST(Reduce, IntegerArithmeticWraps) {
  EXPECT_ALL_EQ(run_pair<int8_t>(DataType::kInt8, ReduceOp::kSum, 127, 1), int8_t{-128});
  EXPECT_ALL_EQ(run_pair<int8_t>(DataType::kInt8, ReduceOp::kSum, -128, -1), int8_t{127});
  EXPECT_ALL_EQ(run_pair<int8_t>(DataType::kInt8, ReduceOp::kProd, 16, 16), int8_t{0});
  EXPECT_ALL_EQ(run_pair<int8_t>(DataType::kInt8, ReduceOp::kProd, -128, -1), int8_t{-128});
  EXPECT_ALL_EQ(run_pair<int8_t>(DataType::kInt8, ReduceOp::kProd, 11, 13), int8_t{-113});  // 143 - 256
  EXPECT_ALL_EQ(run_pair<uint8_t>(DataType::kUint8, ReduceOp::kSum, 255, 2), uint8_t{1});
  EXPECT_ALL_EQ(run_pair<uint8_t>(DataType::kUint8, ReduceOp::kProd, 255, 255), uint8_t{1});
  EXPECT_ALL_EQ(run_pair<int32_t>(DataType::kInt32, ReduceOp::kSum, INT32_MAX, 1), INT32_MIN);
  EXPECT_ALL_EQ(run_pair<int32_t>(DataType::kInt32, ReduceOp::kProd, 65536, 65536), 0);
  EXPECT_ALL_EQ(run_pair<int32_t>(DataType::kInt32, ReduceOp::kProd, INT32_MIN, -1), INT32_MIN);
  EXPECT_ALL_EQ(run_pair<uint32_t>(DataType::kUint32, ReduceOp::kSum, UINT32_MAX, 2), 1u);
  EXPECT_ALL_EQ(run_pair<uint32_t>(DataType::kUint32, ReduceOp::kProd, UINT32_MAX, UINT32_MAX), 1u);
  EXPECT_ALL_EQ(run_pair<int64_t>(DataType::kInt64, ReduceOp::kSum, INT64_MAX, 1), INT64_MIN);
  EXPECT_ALL_EQ(run_pair<int64_t>(DataType::kInt64, ReduceOp::kProd, INT64_MIN, -1), INT64_MIN);
  EXPECT_ALL_EQ(run_pair<int64_t>(DataType::kInt64, ReduceOp::kProd, int64_t{1} << 32, int64_t{1} << 32), 0);
  EXPECT_ALL_EQ(run_pair<uint64_t>(DataType::kUint64, ReduceOp::kSum, UINT64_MAX, 3), 2u);
  EXPECT_ALL_EQ(run_pair<uint64_t>(DataType::kUint64, ReduceOp::kProd, UINT64_MAX, 2), UINT64_MAX - 1);
  // max/min compare with the type's own signedness.
  EXPECT_ALL_EQ(run_pair<int8_t>(DataType::kInt8, ReduceOp::kMax, -1, 1), int8_t{1});
  EXPECT_ALL_EQ(run_pair<uint8_t>(DataType::kUint8, ReduceOp::kMax, 255, 1), uint8_t{255});
  EXPECT_ALL_EQ(run_pair<int64_t>(DataType::kInt64, ReduceOp::kMin, INT64_MIN, INT64_MAX), INT64_MIN);
  EXPECT_ALL_EQ(run_pair<uint64_t>(DataType::kUint64, ReduceOp::kMin, UINT64_MAX, 0), 0u);
  EXPECT_ALL_EQ(run_pair<uint64_t>(DataType::kUint64, ReduceOp::kMax, UINT64_MAX, 1), UINT64_MAX);
}

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
uint64_t bits_of(double d) { return std::bit_cast<uint64_t>(d); }

template <class F, DataType kType>
void check_float_nan_semantics() {
  using L = std::numeric_limits<F>;
  using U = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  const F nan_a = std::bit_cast<F>(static_cast<U>(bits_of(L::quiet_NaN()) | 1));
  const F nan_b = std::bit_cast<F>(static_cast<U>(bits_of(-L::quiet_NaN()) | 2));
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    // Any NaN in gives a NaN out; the first NaN operand is returned as is.
    for (F r : run_pair<F>(kType, op, nan_a, nan_b)) EXPECT_EQ(bits_of(r), bits_of(nan_a));
    for (F r : run_pair<F>(kType, op, F(1), nan_b)) EXPECT_EQ(bits_of(r), bits_of(nan_b));
    for (F r : run_pair<F>(kType, op, nan_a, -L::infinity())) EXPECT_EQ(bits_of(r), bits_of(nan_a));
    // Equal operands: the first one is returned (visible only for +0 / -0).
    for (F r : run_pair<F>(kType, op, F(-0.0), F(0.0))) EXPECT_EQ(bits_of(r), bits_of(F(-0.0)));
    for (F r : run_pair<F>(kType, op, F(0.0), F(-0.0))) EXPECT_EQ(bits_of(r), bits_of(F(0.0)));
  }
  for (F r : run_pair<F>(kType, ReduceOp::kMax, F(-2), F(3))) EXPECT_EQ(r, F(3));
  for (F r : run_pair<F>(kType, ReduceOp::kMin, F(-2), F(3))) EXPECT_EQ(r, F(-2));
  for (F r : run_pair<F>(kType, ReduceOp::kSum, F(1), nan_b)) EXPECT_TRUE(std::isnan(r));
  for (F r : run_pair<F>(kType, ReduceOp::kProd, L::infinity(), F(0))) EXPECT_TRUE(std::isnan(r));
}

TEST(Reduce, FloatMaxMinPropagateNaN) {
  check_float_nan_semantics<float, DataType::kFloat32>();
  check_float_nan_semantics<double, DataType::kFloat64>();
}

std::vector<uint16_t> f16_results(ReduceOp op, uint16_t a, uint16_t b) {
  std::vector<uint16_t> r;
  for (Half h : run_pair<Half>(DataType::kFloat16, op, Half{a}, Half{b})) r.push_back(h.bits);
  return r;
}
std::vector<uint16_t> bf16_results(ReduceOp op, uint16_t a, uint16_t b) {
  std::vector<uint16_t> r;
  for (BHalf h : run_pair<BHalf>(DataType::kBFloat16, op, BHalf{a}, BHalf{b})) r.push_back(h.bits);
  return r;
}

TEST(Reduce, HalfMaxMinPropagateNaN) {
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    // NaNs come back quieted (0x7c01 -> 0x7e01), the first NaN operand wins.
    EXPECT_ALL_EQ(f16_results(op, 0x7c01, 0xfe02), uint16_t{0x7e01});
    EXPECT_ALL_EQ(f16_results(op, 0x3c00, 0xfe02), uint16_t{0xfe02});
    EXPECT_ALL_EQ(bf16_results(op, 0x7f81, 0xffc2), uint16_t{0x7fc1});
    EXPECT_ALL_EQ(bf16_results(op, 0x3f80, 0xffc2), uint16_t{0xffc2});
  }
  EXPECT_ALL_EQ(f16_results(ReduceOp::kMax, 0xc000, 0x4200), uint16_t{0x4200});  // max(-2, 3)
  EXPECT_ALL_EQ(f16_results(ReduceOp::kMin, 0xc000, 0x4200), uint16_t{0xc000});
  EXPECT_ALL_EQ(bf16_results(ReduceOp::kMax, 0xc000, 0x4040), uint16_t{0x4040});
  EXPECT_ALL_EQ(bf16_results(ReduceOp::kMin, 0xc000, 0x4040), uint16_t{0xc000});
}

// f16 sum and prod round once, to nearest even: checked for every half `a` against a set
// of `b`s, with the exact result computed in double (exact for sums and products of two
// halves) and rounded once by _Float16. This also checks that going through float
// (a second rounding) never changes the answer.
TEST(Reduce, HalfSumAndProdAreCorrectlyRounded) {
  std::vector<Half> a(65536);
  for (uint32_t h = 0; h < 65536; ++h) a[h] = Half{static_cast<uint16_t>(h)};
  const uint16_t bs[] = {0x1000 /*2^-11: ties at 1.0*/, 0x1001, 0x3c00, 0xbc00, 0x3555 /*~1/3*/, 0x0001, 0x83ff,
                         0x7bff, 0xfbff, 0x4900, 0x2e66 /*~0.1*/, 0x5640};
  for (const Kernels& k : all_kernels()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      for (uint16_t bbits : bs) {
        std::vector<Half> b(a.size(), Half{bbits}), out(a.size());
        k.fn(DataType::kFloat16, op)(out.data(), a.data(), b.data(), a.size());
        const double db = ref_f16_to_float(bbits);
        for (size_t i = 0; i < a.size(); ++i) {
          const double da = ref_f16_to_float(a[i].bits);
          const double exact = op == ReduceOp::kSum ? da + db : da * db;
          const Half want{ref_double_to_f16(exact)};
          ASSERT_TRUE(equivalent(out[i], want)) << k.name << " " << name_of(op) << " " << show(a[i]) << ", "
                                                << show(Half{bbits}) << ": got " << show(out[i]) << " want " << show(want);
        }
      }
    }
  }
  // Hand-picked ties: 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10 (odd).
  EXPECT_ALL_EQ(f16_results(ReduceOp::kSum, 0x3c00, 0x1000), uint16_t{0x3c00});
  // (1 + 2^-10) + 2^-11: halfway between 0x3c01 (odd) and 0x3c02.
  EXPECT_ALL_EQ(f16_results(ReduceOp::kSum, 0x3c01, 0x1000), uint16_t{0x3c02});
  // 65504 + 16 = 65520 ties to even: infinity.
  EXPECT_ALL_EQ(f16_results(ReduceOp::kSum, 0x7bff, 0x4c00), uint16_t{0x7c00});
}

// bf16 sum and prod: "convert to float, operate in float, round once" for every bf16 `a`.
TEST(Reduce, BFloat16SumAndProdRoundOnceFromFloat) {
  std::vector<BHalf> a(65536);
  for (uint32_t h = 0; h < 65536; ++h) a[h] = BHalf{static_cast<uint16_t>(h)};
  const uint16_t bs[] = {0x3b80 /*2^-8: ties at 1.0*/, 0x3f80, 0xbf80, 0x3eab /*~1/3*/, 0x0001, 0x7f7f, 0x4049, 0x3dcd};
  for (const Kernels& k : all_kernels()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      for (uint16_t bbits : bs) {
        std::vector<BHalf> b(a.size(), BHalf{bbits}), out(a.size());
        k.fn(DataType::kBFloat16, op)(out.data(), a.data(), b.data(), a.size());
        for (size_t i = 0; i < a.size(); ++i) {
          const BHalf want = ref_op(op, a[i], BHalf{bbits});
          ASSERT_TRUE(equivalent(out[i], want)) << k.name << " " << name_of(op) << " " << show(a[i]) << ", "
                                                << show(BHalf{bbits}) << ": got " << show(out[i]) << " want " << show(want);
        }
      }
    }
  }
  // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 0x3f81; 0x3f81 + 2^-8 ties up to 0x3f82.
  EXPECT_ALL_EQ(bf16_results(ReduceOp::kSum, 0x3f80, 0x3b80), uint16_t{0x3f80});
  EXPECT_ALL_EQ(bf16_results(ReduceOp::kSum, 0x3f81, 0x3b80), uint16_t{0x3f82});
}

// ---- f16 conversions --------------------------------------------------------------

TEST(Half, AllBitPatternsConvertExactlyAndRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = half_to_float(bits);
    if (!f16_is_nan(bits)) {
      EXPECT_EQ(bits_of(f), bits_of(ref_f16_to_float(bits))) << std::hex << h;
      EXPECT_EQ(float_to_half(f), bits) << std::hex << h;
    } else {
      // Quieted, sign and payload kept at the top of the float's mantissa (like vcvtph2ps).
      EXPECT_EQ(bits_of(f), (uint32_t{bits & 0x8000u} << 16) | 0x7fc00000u | (uint32_t{bits & 0x3ffu} << 13)) << std::hex << h;
      EXPECT_EQ(float_to_half(f), bits | 0x200) << std::hex << h;
    }
    // The float value survives a trip through half, NaN bits included.
    EXPECT_EQ(bits_of(half_to_float(float_to_half(f))), bits_of(f)) << std::hex << h;
  }
}

void expect_float_to_half_matches(float f) {
  const uint16_t got = float_to_half(f);
  if (std::isnan(f)) {
    const uint32_t u = bits_of(f);
    EXPECT_EQ(got, ((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu)) << std::hex << u;
  } else {
    EXPECT_EQ(got, ref_float_to_f16(f)) << std::hexfloat << f << " bits " << std::hex << bits_of(f);
  }
}

TEST(Half, FloatToHalfMatchesFloat16) {
  // Every float with a stride through the bit patterns (~1M: all exponents, signs, NaNs).
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) expect_float_to_half_matches(std::bit_cast<float>(static_cast<uint32_t>(u)));
  // Each halfway point between neighbouring halves, and the floats just either side of it:
  // ties to even, subnormal ties, and 65520 (halfway to infinity).
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = ref_f16_to_float(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      expect_float_to_half_matches(f);
      expect_float_to_half_matches(-f);
    }
  }
  // Below the smallest subnormal, around the normal/subnormal boundary, overflow.
  const float cases[] = {0.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(1.0f, -26),
                         std::nextafter(std::ldexp(1.0f, -25), 1.0f), std::ldexp(1.5f, -25),
                         std::ldexp(1.0f, -14), std::nextafter(std::ldexp(1.0f, -14), 0.0f),
                         std::ldexp(1023.5f, -24), std::numeric_limits<float>::denorm_min(),
                         std::numeric_limits<float>::min(), 65504.0f, 65519.0f, std::nextafter(65520.0f, 0.0f),
                         65520.0f, 65536.0f, 1e10f, std::numeric_limits<float>::max(), INFINITY};
  for (float f : cases) {
    expect_float_to_half_matches(f);
    expect_float_to_half_matches(-f);
  }
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);                        // tie -> even (0)
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);  // just above the tie
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -24)), 0x0002);                        // 1.5 units -> 2
  EXPECT_EQ(float_to_half(std::ldexp(1023.5f, -24)), 0x0400);                     // rounds up to the smallest normal
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  // A million random floats, and random floats in the half range.
  std::mt19937 rng(42);
  for (int i = 0; i < 1'000'000; ++i) {
    expect_float_to_half_matches(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    expect_float_to_half_matches(std::ldexp(static_cast<float>(rng() & 0xffffff), static_cast<int>(rng() % 48) - 60));
  }
}

// The software conversions agree with the F16C instructions the AVX2 kernels use, NaNs
// included, so the two kernel tables can agree bit for bit.
__attribute__((target("f16c"))) uint16_t f16c_from_float(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float f16c_to_float(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

TEST(Half, MatchesF16cInstructions) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(bits_of(half_to_float(static_cast<uint16_t>(h))), bits_of(f16c_to_float(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  std::mt19937 rng(43);
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(u ^ (rng() & 0xfff)));
    ASSERT_EQ(float_to_half(f), f16c_from_float(f)) << std::hex << bits_of(f);
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // halfway points again
    const double lo = ref_f16_to_float(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    for (float f : {mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      ASSERT_EQ(float_to_half(f), f16c_from_float(f)) << std::hex << bits_of(f);
    }
  }
}

// The kernels' inline, branch-free copies of the conversions (reduce_kernels.hpp) agree
// with half.cc everywhere: every half, and a spread of floats with all the edge cases.
TEST(Half, KernelConversionsMatchHalfCc) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(bits_of(reduce_internal::f16_widen(static_cast<uint16_t>(h))), bits_of(half_to_float(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  auto check = [](float f) { ASSERT_EQ(reduce_internal::f16_narrow(f), float_to_half(f)) << std::hex << bits_of(f); };
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) check(std::bit_cast<float>(static_cast<uint32_t>(u)));
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // halfway points and their neighbours
    const double lo = ref_f16_to_float(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    for (float f : {mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) check(f);
  }
  std::mt19937 rng(45);
  for (int i = 0; i < 1'000'000; ++i) {
    check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    check(std::ldexp(static_cast<float>(rng() & 0xffffff), static_cast<int>(rng() % 48) - 60));
  }
}

// The same through the compiled kernels: max(h, -inf) is h itself (NaNs quieted) for all
// 65536 halves, in every table.
TEST(Half, KernelsPassEveryHalfThrough) {
  std::vector<uint16_t> a(65536), b(65536, 0xfc00);
  for (uint32_t h = 0; h < 65536; ++h) a[h] = static_cast<uint16_t>(h);
  for (const Kernels& k : all_kernels()) {
    std::vector<uint16_t> out(a.size());
    k.fn(DataType::kFloat16, ReduceOp::kMax)(out.data(), a.data(), b.data(), a.size());
    for (uint32_t h = 0; h < 65536; ++h) {
      ASSERT_EQ(out[h], f16_is_nan(static_cast<uint16_t>(h)) ? (h | 0x200) : h) << k.name << " " << std::hex << h;
    }
  }
}

// ---- bf16 conversions -------------------------------------------------------------

TEST(BFloat16, AllBitPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = bf16_to_float(bits);
    EXPECT_EQ(bits_of(f), uint32_t{h} << 16);
    EXPECT_EQ(float_to_bf16(f), bf16_is_nan(bits) ? (bits | 0x40) : bits) << std::hex << h;
    EXPECT_EQ(bits_of(bf16_to_float(float_to_bf16(bf16_to_float(float_to_bf16(f))))),
              bits_of(bf16_to_float(float_to_bf16(f))));
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f808000, 0x3f80},  // halfway, lower neighbour even: down
      {0x3f818000, 0x3f82},  // halfway, lower neighbour odd: up
      {0x3f808001, 0x3f81},  // just above halfway
      {0x3f807fff, 0x3f80},  // just below halfway
      {0xbf818000, 0xbf82},  // negative, same magnitudes
      {0x3fff8000, 0x4000},  // tie rounds up across the exponent
      {0x7f7f8000, 0x7f80},  // halfway between the largest bf16 (odd) and infinity
      {0x7f7f7fff, 0x7f7f},
      {0x7f7fffff, 0x7f80},  // FLT_MAX rounds to infinity
      {0x00008000, 0x0000},  // subnormal tie to even (0)
      {0x00018000, 0x0002},  // subnormal tie to even (2)
      {0x80018000, 0x8002},
      {0x007fffff, 0x0080},  // largest float subnormal rounds to the smallest normal
      {0x7f800000, 0x7f80},  // infinity
      {0xff800000, 0xff80},
      {0x7f800001, 0x7fc0},  // signalling NaN whose payload is all in the low half: still NaN
      {0xff800001, 0xffc0},
      {0x7fffffff, 0x7fff},  // NaN with all payload bits: not rounded into infinity
      {0x7fbfffff, 0x7fff},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_bf16(std::bit_cast<float>(c.in)), c.out) << std::hex << c.in;
    EXPECT_EQ(ref_float_to_bf16(std::bit_cast<float>(c.in)), c.out) << std::hex << c.in;
  }
  std::mt19937 rng(44);
  for (int i = 0; i < 1'000'000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    ASSERT_EQ(float_to_bf16(f), ref_float_to_bf16(f)) << std::hex << bits_of(f);
  }
}

// ---- finish_average and reduce_fn edge cases ---------------------------------------

TEST(Reduce, FinishAverageTruncatesTowardZero) {
  std::vector<int8_t> i8 = {-7, 7, -128, 127, -1};
  finish_average(i8.data(), i8.size(), DataType::kInt8, 2);
  EXPECT_EQ(i8, (std::vector<int8_t>{-3, 3, -64, 63, 0}));
  std::vector<int8_t> big = {-100, 100};
  finish_average(big.data(), big.size(), DataType::kInt8, 200);  // nranks outside int8's range
  EXPECT_EQ(big, (std::vector<int8_t>{0, 0}));
  std::vector<uint8_t> u8 = {255, 5};
  finish_average(u8.data(), u8.size(), DataType::kUint8, 2);
  EXPECT_EQ(u8, (std::vector<uint8_t>{127, 2}));
  std::vector<int32_t> i32 = {-7, -8, INT32_MIN};
  finish_average(i32.data(), i32.size(), DataType::kInt32, 3);
  EXPECT_EQ(i32, (std::vector<int32_t>{-2, -2, INT32_MIN / 3}));
  std::vector<int64_t> i64 = {INT64_MIN, -9};
  finish_average(i64.data(), i64.size(), DataType::kInt64, 5);
  EXPECT_EQ(i64, (std::vector<int64_t>{INT64_MIN / 5, -1}));
  std::vector<uint64_t> u64 = {UINT64_MAX};
  finish_average(u64.data(), u64.size(), DataType::kUint64, 5);
  EXPECT_EQ(u64, (std::vector<uint64_t>{UINT64_MAX / 5}));
  std::vector<float> f = {1.0f, -7.0f};
  finish_average(f.data(), f.size(), DataType::kFloat32, 3);
  EXPECT_EQ(f, (std::vector<float>{1.0f / 3.0f, -7.0f / 3.0f}));
  std::vector<uint16_t> h = {0x3c00};  // 1/3 in half is 0x3555
  finish_average(h.data(), h.size(), DataType::kFloat16, 3);
  EXPECT_EQ(h[0], 0x3555);
}

TEST(Reduce, FinishAverageLeavesDataAloneForOneRankOrBadInput) {
  std::vector<int32_t> v = {-7, 9};
  for (int n : {1, 0, -3}) {
    finish_average(v.data(), v.size(), DataType::kInt32, n);
    EXPECT_EQ(v, (std::vector<int32_t>{-7, 9})) << n;
  }
  finish_average(v.data(), v.size(), static_cast<DataType>(77), 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-7, 9}));
  finish_average(nullptr, 0, DataType::kFloat32, 4);
}

TEST(Reduce, ReduceFnRejectsInvalidEnums) {
  EXPECT_EQ(reduce_fn(static_cast<DataType>(77), ReduceOp::kSum), nullptr);
  EXPECT_EQ(reduce_fn(static_cast<DataType>(kNumDataTypes), ReduceOp::kSum), nullptr);
  EXPECT_EQ(reduce_fn(DataType::kFloat32, static_cast<ReduceOp>(77)), nullptr);
  EXPECT_EQ(reduce_fn(static_cast<DataType>(77), static_cast<ReduceOp>(5)), nullptr);
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) EXPECT_NE(reduce_fn(t, op), nullptr) << name_of(t) << " " << name_of(op);
    EXPECT_EQ(reduce_fn(t, ReduceOp::kAvg), reduce_fn(t, ReduceOp::kSum)) << "avg reduces as sum";
  }
  reduce_fn(DataType::kInt32, ReduceOp::kSum)(nullptr, nullptr, nullptr, 0);  // count 0 touches nothing
}

TEST(Reduce, IsaMatchesTheTableInUse) {
  const std::string isa = reduce_isa();
  const ReduceTable* avx2 = reduce_internal::avx2_table_if_usable();
  EXPECT_EQ(isa, avx2 ? "avx2" : "generic");
  const ReduceTable& used = avx2 ? *avx2 : reduce_internal::generic_table();
  EXPECT_EQ(reduce_fn(DataType::kFloat32, ReduceOp::kSum), used.fn[7][0]);
  EXPECT_NE(reduce_internal::generic_table().fn[7][0], nullptr);
}

}  // namespace
}  // namespace weft
