// Specific behaviour of the reduction kernels, in every table: integer arithmetic wraps,
// max/min propagate NaNs, and f16/bf16 sums and products round once.
#include <gtest/gtest.h>

#include "tests/unit/reduce_reference.hpp"

namespace weft {
namespace {

using namespace reference;  // NOLINT: the shared references read as part of each test

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

}  // namespace
}  // namespace weft
