// Reduction kernels (collectives/reduce.hpp): every kernel table this CPU can run is checked
// against the references of reduce_reference.hpp for every type, op and length, aliasing,
// and finish_average. reduce_semantics_test.cc checks specific behaviour (wrapping, NaNs,
// rounding) and half_test.cc the f16/bf16 conversions.
#include <gtest/gtest.h>

#include "tests/unit/reduce_reference.hpp"

namespace weft {

// gtest prints parameters with this (found by ADL, so not in the anonymous namespace).
void PrintTo(DataType type, std::ostream* os) { *os << name_of(type); }

namespace {

using namespace reference;  // NOLINT: the shared references read as part of each test

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
