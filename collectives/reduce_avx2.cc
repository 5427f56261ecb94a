// The reduction kernel table compiled with -mavx2 -mf16c -mfma (per-file options in
// CMakeLists.txt). The integer, float, double and bf16 kernels are the shared templates,
// auto-vectorised with 256-bit registers; f16 uses the F16C conversion instructions, 8
// elements at a time, with the branch-free software conversions for the tail. Nothing
// here may run before reduce_fn() has checked the CPU, hence the constant-initialised table.
#include <immintrin.h>

#include "collectives/reduce_kernels.hpp"

namespace weft::reduce_internal {
namespace {

// The float operation on 8 lanes, with exactly the semantics of apply<float, op>():
// max = a < b ? b : a, min = b < a ? b : a, then a NaN in a wins, then a NaN in b.
// (vmaxps/vminps return the second operand on NaN, so they would not do.)
template <ReduceOp op>
inline __m256 apply8(__m256 a, __m256 b) {
  if constexpr (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
    return _mm256_add_ps(a, b);
  } else if constexpr (op == ReduceOp::kProd) {
    return _mm256_mul_ps(a, b);
  } else {
    __m256 r = (op == ReduceOp::kMax) ? _mm256_blendv_ps(a, b, _mm256_cmp_ps(a, b, _CMP_LT_OQ))
                                      : _mm256_blendv_ps(a, b, _mm256_cmp_ps(b, a, _CMP_LT_OQ));
    r = _mm256_blendv_ps(r, b, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    return _mm256_blendv_ps(r, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
}

// vcvtph2ps is exact; vcvtps2ph with _MM_FROUND_TO_NEAREST_INT rounds to nearest even
// regardless of MXCSR. Both quiet NaNs the same way half.cc and f16_widen/f16_narrow do, so
// results match the generic table bit for bit.
struct F16cF16 {
  template <ReduceOp op>
  static void fn(void* out, const void* a, const void* b, size_t count) {
    AnyU16* o = static_cast<AnyU16*>(out);
    const AnyU16* x = static_cast<const AnyU16*>(a);
    const AnyU16* y = static_cast<const AnyU16*>(b);
    size_t i = 0;
    // Both loads of a block come before its store, so out == a or out == b is fine.
    for (; i + 8 <= count; i += 8) {
      const __m256 va = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
      const __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
      const __m128i r = _mm256_cvtps_ph(apply8<op>(va, vb), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), r);
    }
    f16_soft_loop<op>(o + i, x + i, y + i, count - i);
  }
};

constexpr ReduceTable kAvx2Table = make_table<F16cF16>();

}  // namespace

const ReduceTable& avx2_table() { return kAvx2Table; }

}  // namespace weft::reduce_internal
