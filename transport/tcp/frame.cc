#include "transport/tcp/frame.hpp"

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace weft::transport::tcp {
namespace {

// Debian 12 packages neither google/crc32c nor an Abseil with absl/crc, so the few lines of
// CRC32C live here: the hardware instruction, and the reflected polynomial's table for CPUs
// without it.
constexpr uint32_t kPolynomial = 0x82f63b78;  // Castagnoli, reflected
constexpr uint16_t kMagic = 0x7766;           // "wf"

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc32c_table(const std::byte* p, size_t n, uint32_t crc) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ static_cast<uint8_t>(p[i])) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const std::byte* p, size_t n,
                                                         uint32_t crc) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, static_cast<uint8_t>(*p));
  return c32;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

template <typename T>
void put(std::byte* out, size_t at, T v) {
  std::memcpy(out + at, &v, sizeof v);
}
template <typename T>
T get(const std::byte* in, size_t at) {
  T v;
  std::memcpy(&v, in + at, sizeof v);
  return v;
}

// Layout (host byte order: every rank runs the same build on the same architecture):
// 0 magic u16 | 2 type u8 | 3 flags u8 | 4 epoch u32 | 8 offset u64 | 16 length u32 |
// 20 next_path u8 | 21 reserved | 24 payload_crc u32 | 28 ack u64 |
// 36 header_crc u32 (of bytes 0-35)
constexpr size_t kSealed = 36;
static_assert(kSealed + 4 == kFrameHeaderBytes);
constexpr uint8_t kChecksummed = 1;
constexpr uint8_t kLent = 2;

}  // namespace

uint32_t crc32c(const std::byte* data, size_t len, uint32_t crc) {
  crc = ~crc;
#if defined(__x86_64__)
  if (kHaveSse42) return ~crc32c_sse42(data, len, crc);
#endif
  return ~crc32c_table(data, len, crc);
}

void encode_frame(const Frame& f, std::byte* out) {
  std::memset(out, 0, kFrameHeaderBytes);
  put<uint16_t>(out, 0, kMagic);
  put<uint8_t>(out, 2, f.type);
  put<uint8_t>(out, 3, (f.checksummed ? kChecksummed : 0) | (f.lent ? kLent : 0));
  put<uint32_t>(out, 4, f.epoch);
  put<uint64_t>(out, 8, f.offset);
  put<uint32_t>(out, 16, f.length);
  put<uint8_t>(out, 20, f.next_path);
  put<uint32_t>(out, 24, f.payload_crc);
  put<uint64_t>(out, 28, f.ack);
  put<uint32_t>(out, kSealed, crc32c(out, kSealed));
}

absl::StatusOr<Frame> decode_frame(const std::byte* in) {
  if (get<uint16_t>(in, 0) != kMagic) {
    return absl::DataLossError("a frame header without weft's magic: the stream is out of step");
  }
  if (get<uint32_t>(in, kSealed) != crc32c(in, kSealed)) {
    return absl::DataLossError("a frame header whose own CRC32C does not match: corrupted");
  }
  Frame f;
  const uint8_t type = get<uint8_t>(in, 2);
  if (type < Frame::kData || type > Frame::kResend) {
    return absl::DataLossError(absl::StrCat("a frame of unknown type ", type));
  }
  f.type = static_cast<Frame::Type>(type);
  f.checksummed = (get<uint8_t>(in, 3) & kChecksummed) != 0;
  f.lent = (get<uint8_t>(in, 3) & kLent) != 0;
  f.epoch = get<uint32_t>(in, 4);
  f.offset = get<uint64_t>(in, 8);
  f.length = get<uint32_t>(in, 16);
  f.next_path = get<uint8_t>(in, 20);
  f.payload_crc = get<uint32_t>(in, 24);
  f.ack = get<uint64_t>(in, 28);
  return f;
}

}  // namespace weft::transport::tcp
