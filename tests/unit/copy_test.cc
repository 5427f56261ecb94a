// copy_bytes and stream_bytes must copy exactly the bytes asked for, whatever the sizes and
// the alignment of either end, and touch nothing outside the destination range.
#include "src/base/copy.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

constexpr std::byte kUntouched{0xA5};

using CopyFn = void (*)(void*, const void*, size_t);

void expect_copies(CopyFn copy, size_t n, size_t src_offset, size_t dst_offset) {
  constexpr size_t kGuard = 64;
  std::vector<std::byte> src(n + src_offset);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 131 + 7);
  std::vector<std::byte> dst(dst_offset + n + kGuard, kUntouched);
  copy(dst.data() + dst_offset, src.data() + src_offset, n);
  for (size_t i = 0; i < dst_offset; ++i) {
    ASSERT_EQ(dst[i], kUntouched) << "wrote before the destination: n=" << n;
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(dst[dst_offset + i], src[src_offset + i])
        << "n=" << n << " src+" << src_offset << " dst+" << dst_offset << " byte " << i;
  }
  for (size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(dst[dst_offset + n + i], kUntouched) << "wrote past the destination: n=" << n;
  }
}

class CopyTest : public ::testing::TestWithParam<CopyFn> {};

TEST_P(CopyTest, EverySizeAroundTheVectorPathsEdges) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{2047},
                   size_t{2048}, size_t{2049}, size_t{2048 + 127}, size_t{4096 + 33},
                   size_t{65536 + 5}, (size_t{1} << 20) - 1, size_t{1} << 20,
                   (size_t{1} << 20) + 9}) {
    expect_copies(GetParam(), n, 0, 0);
    expect_copies(GetParam(), n, 3, 8);
  }
}

TEST_P(CopyTest, EveryRelativeAlignment) {
  for (size_t src_offset = 0; src_offset < 64; ++src_offset) {
    for (size_t dst_offset = 0; dst_offset < 64; dst_offset += 1) {
      expect_copies(GetParam(), 4096 + 77, src_offset, dst_offset);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Copies, CopyTest, ::testing::Values(&copy_bytes, &stream_bytes),
                         [](const auto& info) {
                           return std::string(info.param == &copy_bytes ? "copy_bytes"
                                                                        : "stream_bytes");
                         });

}  // namespace
}  // namespace weft
