// The f16/bf16 conversions (collectives/half.hpp) and the kernels' inline copies of them:
// every half and bf16 bit pattern, ties, subnormals, overflow and NaNs, against the
// compiler's _Float16 and, when the CPU has it, the F16C instructions.
#include <gtest/gtest.h>
#include <immintrin.h>

#include "tests/unit/reduce_reference.hpp"

namespace weft {
namespace {

using namespace reference;  // NOLINT: the shared references read as part of each test

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

}  // namespace
}  // namespace weft
