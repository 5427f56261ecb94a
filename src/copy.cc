#include "src/copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace weft {
namespace {

// Below this glibc copies with vector moves anyway; at and above the upper bound it leaves
// `rep movsb` for its non-temporal path, which is as fast as this loop.
constexpr size_t kOwnLoopFrom = 2048;
constexpr size_t kOwnLoopBelow = size_t{1} << 20;

using Unaligned = char __attribute__((vector_size(32), aligned(1)));
using Aligned = char __attribute__((vector_size(32)));

Unaligned load(const char* p) { return *reinterpret_cast<const Unaligned*>(p); }

// Unaligned loads, stores aligned to 32 bytes of the destination; the first and last 32
// bytes are stored unaligned, overlapping the aligned body. n >= 32.
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
void vector_copy(char* d, const char* s, size_t n) {
  const Unaligned head = load(s);
  const Unaligned tail = load(s + n - 32);
  *reinterpret_cast<Unaligned*>(d) = head;
  size_t i = 32 - (reinterpret_cast<uintptr_t>(d) & 31);
  for (; i + 128 <= n; i += 128) {
    const Unaligned a = load(s + i), b = load(s + i + 32);
    const Unaligned c = load(s + i + 64), e = load(s + i + 96);
    *reinterpret_cast<Aligned*>(d + i) = a;
    *reinterpret_cast<Aligned*>(d + i + 32) = b;
    *reinterpret_cast<Aligned*>(d + i + 64) = c;
    *reinterpret_cast<Aligned*>(d + i + 96) = e;
  }
  for (; i + 32 <= n; i += 32) *reinterpret_cast<Aligned*>(d + i) = load(s + i);
  *reinterpret_cast<Unaligned*>(d + n - 32) = tail;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void stream_avx2(char* d, const char* s, size_t n) {
  *reinterpret_cast<Unaligned*>(d) = load(s);
  const Unaligned tail = load(s + n - 32);
  size_t i = 32 - (reinterpret_cast<uintptr_t>(d) & 31);
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  for (; i + 32 <= n; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  }
  _mm_sfence();
  *reinterpret_cast<Unaligned*>(d + n - 32) = tail;
}
#endif

}  // namespace

void stream_bytes(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kOwnLoopFrom && __builtin_cpu_supports("avx2")) {
    stream_avx2(static_cast<char*>(dst), static_cast<const char*>(src), n);
    return;
  }
#endif
  copy_bytes(dst, src, n);
}

void copy_bytes(void* dst, const void* src, size_t n) {
  if (n < kOwnLoopFrom || n >= kOwnLoopBelow) {
    std::memcpy(dst, src, n);
    return;
  }
  vector_copy(static_cast<char*>(dst), static_cast<const char*>(src), n);
}

}  // namespace weft
