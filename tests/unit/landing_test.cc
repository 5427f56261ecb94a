// A Landing must leave exactly dst[i] = local[i] op incoming[i] however a link splits the
// incoming stream, and a streamed one (results written with non-temporal stores through a
// block buffer) must leave the very same bits as a plain one, touching nothing outside dst.
#include "collectives/stream.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/reduce.hpp"
#include "gtest/gtest.h"
#include "weft/types.hpp"

namespace weft {
namespace {

constexpr std::byte kUntouched{0xA5};
constexpr size_t kGuard = 64;

// Feeds `incoming` to `landing` in pieces of the given sizes, cycling, so that pieces end
// inside elements and blocks.
void feed(Landing& landing, const std::vector<std::byte>& incoming,
          const std::vector<size_t>& pieces) {
  size_t at = 0;
  for (size_t k = 0; at < incoming.size(); ++k) {
    const size_t n = std::min(pieces[k % pieces.size()], incoming.size() - at);
    landing.accept(incoming.data() + at, n);
    at += n;
  }
}

std::vector<std::byte> pattern(size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  // Small integers in every byte: sums and products of any type stay ordinary numbers.
  for (size_t i = 0; i < n; ++i) v[i] = std::byte((i * seed + 3) % 7);
  return v;
}

// dst_offset puts the destination at every alignment the streaming stores must handle.
std::vector<std::byte> land(bool streamed, DataType type, ReduceOp op, size_t bytes,
                            size_t dst_offset, const std::vector<size_t>& pieces) {
  const auto local = pattern(bytes, 5);
  const auto incoming = pattern(bytes, 11);
  std::vector<std::byte> dst(dst_offset + bytes + kGuard, kUntouched);
  const ReduceFn fn = reduce_fn(type, op);
  alignas(64) static std::byte block[kStreamBlockBytes];
  Landing landing = streamed ? Landing::reduce_streamed(dst.data() + dst_offset, local.data(),
                                                        bytes, fn, size_of(type), block)
                             : Landing::reduce(dst.data() + dst_offset, local.data(), bytes, fn,
                                               size_of(type));
  feed(landing, incoming, pieces);
  EXPECT_TRUE(landing.done());
  return dst;
}

TEST(Landing, StreamedReduceLeavesTheSameBitsAsPlainForEveryTypeAndOp) {
  const std::vector<size_t> pieces = {1, 7, 4096 + 3, 40000, 5};
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto type = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      const size_t elem = size_of(type);
      // Around the 32 KiB block: under, at, over, and several blocks with a ragged end.
      for (size_t elems : {size_t{1}, size_t{3}, (size_t{32} << 10) / elem,
                           (size_t{32} << 10) / elem + 1, (size_t{100} << 10) / elem + 7}) {
        for (size_t dst_offset : {size_t{0}, size_t{8}, size_t{24}}) {
          const size_t bytes = elems * elem;
          const auto plain = land(false, type, op, bytes, dst_offset, pieces);
          const auto streamed = land(true, type, op, bytes, dst_offset, pieces);
          ASSERT_EQ(plain, streamed) << name_of(type) << " " << name_of(op) << " " << bytes
                                     << " bytes at +" << dst_offset;
          for (size_t i = 0; i < dst_offset; ++i) ASSERT_EQ(streamed[i], kUntouched);
          for (size_t i = 0; i < kGuard; ++i) ASSERT_EQ(streamed[dst_offset + bytes + i], kUntouched);
        }
      }
    }
  }
}

TEST(Landing, ReduceIsElementwise) {
  const std::vector<std::byte> local = pattern(4 * 1000, 5), incoming = pattern(4 * 1000, 11);
  std::vector<std::byte> dst(local.size());
  std::vector<std::byte> block(kStreamBlockBytes);
  Landing landing = Landing::reduce_streamed(dst.data(), local.data(), dst.size(),
                                             reduce_fn(DataType::kInt32, ReduceOp::kSum), 4,
                                             block.data());
  feed(landing, incoming, {3, 5, 1024});
  for (size_t i = 0; i < 1000; ++i) {
    int32_t a, b, r;
    std::memcpy(&a, local.data() + 4 * i, 4);
    std::memcpy(&b, incoming.data() + 4 * i, 4);
    std::memcpy(&r, dst.data() + 4 * i, 4);
    ASSERT_EQ(r, a + b) << "element " << i;
  }
}

}  // namespace
}  // namespace weft
