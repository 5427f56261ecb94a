#include "src/base/copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace weft {
namespace {

// Our loop runs from kLargeCopyFrom (copy.hpp) to this bound; at and above it glibc leaves
// `rep movsb` for its non-temporal path, which is as fast as this loop.
constexpr size_t kOwnLoopBelow = size_t{1} << 20;

#if defined(__x86_64__)
inline bool have_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}

// Where memcpy's `rep movsb` falls into the trap, this loop is the faster copy; elsewhere
// memcpy is (Zen 5: 63-68 against 57 GB/s for 128 KiB pieces in cache, 27 against 23 GB/s
// from memory).
inline bool own_loop_beats_memcpy() {
  static const bool own = have_avx2() && rep_movsb_slow_out_of_step();
  return own;
}

// Unaligned loads, stores aligned to 32 bytes of the destination; the first and last 32
// bytes are stored unaligned, overlapping the aligned body. n >= 32. With `stream`, the
// body bypasses the caches (non-temporal stores, fenced at the end).
#define WEFT_AVX2 __attribute__((target("avx2"), always_inline)) inline

WEFT_AVX2 __m256i load(const char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

template <bool stream>
WEFT_AVX2 void store(char* p, __m256i v) {
  if constexpr (stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v);
  } else {
    _mm256_store_si256(reinterpret_cast<__m256i*>(p), v);
  }
}

template <bool stream>
__attribute__((target("avx2"))) void copy_avx2(char* d, const char* s, size_t n) {
  const __m256i head = load(s);
  const __m256i tail = load(s + n - 32);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), head);
  size_t i = 32 - (reinterpret_cast<uintptr_t>(d) & 31);
  for (; i + 128 <= n; i += 128) {
    const __m256i a = load(s + i), b = load(s + i + 32);
    const __m256i c = load(s + i + 64), e = load(s + i + 96);
    store<stream>(d + i, a);
    store<stream>(d + i + 32, b);
    store<stream>(d + i + 64, c);
    store<stream>(d + i + 96, e);
  }
  for (; i + 32 <= n; i += 32) store<stream>(d + i, load(s + i));
  if constexpr (stream) _mm_sfence();
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + n - 32), tail);
}
#undef WEFT_AVX2
#endif

}  // namespace

// The trap (glibc bug 30994) is a trait of AMD family 0x19, Zen 3 and Zen 4. Zen 5 (family
// 0x1a) copies as fast at every offset, with memcpy and with process_vm_readv alike.
bool rep_movsb_slow_out_of_step() {
#if defined(__x86_64__)
  static const bool slow = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // AuthenticAMD
    if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    const unsigned family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);
    return family == 0x19;
  }();
  return slow;
#else
  return false;
#endif
}

size_t stream_copies_from() {
  // Streaming skips reading the destination's old lines, but sends the result to memory.
  // With a 32 MiB L3 (AMD Zen 3) it won from 16 MiB; with a 300 MiB L3 (Intel Xeon) it lost
  // at 32-64 MiB, where the peer's read-back found the result in cache, and won at 128 MiB.
  static const size_t from = [] {
    constexpr size_t kFloor = size_t{16} << 20;
    const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (llc <= 0 || cpus <= 0) return kFloor;
    return std::max(kFloor, static_cast<size_t>(llc) / static_cast<size_t>(cpus) / 4 * 3);
  }();
  return from;
}

size_t stream_output_copies_from() {
  // 48 MiB on an Intel Xeon VM with a 260 MiB L3 and 2 cores (docs/PERFORMANCE.md), 2-rank
  // allgather and broadcast against Open MPI, an out-of-place block then an in-place one:
  // with the copy streamed from 2 MiB, in-place calls of 4-32 MiB took 1.3-1.5x as long
  // (their peer read the copy from memory) and out-of-place ones were level; from 64 MiB,
  // streaming won out of place (allgather 1.14-1.17x Open MPI, against 0.98-1.02 with the
  // copy cached) and in place was level.
  return stream_copies_from() / 2;
}

void stream_bytes(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kLargeCopyFrom && have_avx2()) {
    copy_avx2<true>(static_cast<char*>(dst), static_cast<const char*>(src), n);
    return;
  }
#endif
  copy_bytes(dst, src, n);
}

void copy_large(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n < kOwnLoopBelow && own_loop_beats_memcpy()) {
    copy_avx2<false>(static_cast<char*>(dst), static_cast<const char*>(src), n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace weft
