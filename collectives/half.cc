// Software IEEE binary16 <-> binary32 conversions. Pure integer bit manipulation so the
// result does not depend on the CPU (no F16C), on MXCSR's FTZ/DAZ bits or on the rounding
// mode. NaN handling matches the x86 F16C instructions (vcvtph2ps / vcvtps2ph), so the
// vectorised AVX2 kernels and the scalar tails/generic kernels agree bit for bit:
// a NaN is quieted (quiet bit set), its sign kept and its payload's top bits carried over.
#include "collectives/half.hpp"

#include <bit>

namespace weft {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) {
    // Infinity, or NaN: quiet it (bit 22) and keep the 10 payload bits at the top.
    if (man == 0) return bits_to_float(sign | 0x7f800000u);
    return bits_to_float(sign | 0x7fc00000u | (man << 13));
  }
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);  // +-0
    // Subnormal: value = man * 2^-24. Its leading one at bit p (0..9) becomes the implicit
    // bit of a normal float with exponent p - 24; every half subnormal is a float normal.
    const int p = 31 - std::countl_zero(man);
    const uint32_t fexp = static_cast<uint32_t>(p + 127 - 24);
    const uint32_t fman = (man << (23 - p)) & 0x7fffffu;
    return bits_to_float(sign | (fexp << 23) | fman);
  }
  // Normal: rebias the exponent (15 -> 127) and widen the mantissa; exact.
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t float_to_half(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t u = bits & 0x7fffffffu;

  if (u >= 0x7f800000u) {
    if (u == 0x7f800000u) return sign | 0x7c00u;  // infinity
    // NaN: quiet, keep the top 10 payload bits (what vcvtps2ph does).
    return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  }
  // 65520 = 0x477ff000 is halfway between the largest half (65504, odd mantissa) and
  // 2^16; ties go to even, i.e. to infinity, and so does everything above.
  if (u >= 0x477ff000u) return sign | 0x7c00u;

  if (u >= 0x38800000u) {
    // Result is a normal half (|f| >= 2^-14 before rounding). Rebias (127 -> 15), then round
    // the 13 dropped bits to nearest even; a mantissa carry correctly bumps the exponent.
    uint32_t v = u - (112u << 23);
    v += 0xfffu + ((v >> 13) & 1u);
    return static_cast<uint16_t>(sign | (v >> 13));
  }

  // Result is a half subnormal (or zero, or the smallest normal after rounding up): count
  // units of 2^-24. Below 2^-25 everything rounds to zero (2^-25 itself is a tie -> 0 even);
  // float subnormals land here too.
  const uint32_t exp = u >> 23;
  if (exp < 102) return sign;
  const uint32_t m = (u & 0x7fffffu) | 0x800000u;  // 24-bit significand, value m * 2^(exp-150)
  const uint32_t shift = 126 - exp;                // 14..24: m >> shift is the unit count
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // q == 0x400 is the smallest normal
  return static_cast<uint16_t>(sign | q);
}

}  // namespace weft
