// The GPU's reduction kernels against the host's, bit for bit: every type and op, sizes
// around every vector and block boundary, out of place, in place, and off the 16-byte
// alignment the wide loads want. Inputs are random bits, so NaNs, infinities and subnormals
// all come up; a NaN from a sum or product need only be a NaN (its payload is the FPU's).
// Skips, saying why, where this process can use no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/reduce.hpp"
#include "collectives/reduce_device.hpp"
#include "src/device/device.hpp"
#include "tests/gpu/gpu_buffer.hpp"

namespace weft {
namespace {

using gpu_test::GpuBuffer;

class GpuReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!device::gpus().ok()) GTEST_SKIP() << "no GPU to test on: " << device::gpus().status().message();
  }
};

bool is_nan(DataType type, const std::byte* p) {
  switch (type) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7c00u;
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7f80u;
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f != f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d != d;
    }
    default: return false;
  }
}

// The first element where `got` differs from `want`, or -1. A NaN matches any NaN where
// `any_nan` (sums, products, divisions: the payload is the FPU's).
int64_t first_difference(DataType type, const std::byte* got, const std::byte* want, size_t count,
                         bool any_nan) {
  const size_t e = size_of(type);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * e, want + i * e, e) == 0) continue;
    if (any_nan && is_nan(type, got + i * e) && is_nan(type, want + i * e)) continue;
    return static_cast<int64_t>(i);
  }
  return -1;
}

std::vector<std::byte> random_bytes(size_t n, std::mt19937_64& rng) {
  // Eight bytes a draw: the largest count's inputs, for every type, op and layout, are
  // gigabytes in all, and one draw a byte took most of the test's time on the GPU machine.
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; i += sizeof(uint64_t)) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min(sizeof r, n - i));
  }
  return v;
}

constexpr size_t kCounts[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 255, 257, 4097, 65537,
                              (size_t{1} << 22) + 5};

// Apart; out == a; out == b; every pointer one element off 16 bytes (the element-wise
// path); only b off (the three pointers disagree, so the element-wise path too).
enum class Layout { kApart, kInPlace, kInPlaceSecond, kOffAlignment, kMixedAlignment };
constexpr Layout kLayouts[] = {Layout::kApart, Layout::kInPlace, Layout::kInPlaceSecond,
                               Layout::kOffAlignment, Layout::kMixedAlignment};
const char* name_of(Layout l) {
  switch (l) {
    case Layout::kApart: return "out of place";
    case Layout::kInPlace: return "in place (out == a)";
    case Layout::kInPlaceSecond: return "in place (out == b)";
    case Layout::kOffAlignment: return "off alignment";
    default: return "mixed alignment";
  }
}

// First, while no test has launched a kernel: every one loads without a launch (a
// communicator does this before it queues any wait on a stream).
TEST_F(GpuReduce, EveryKernelLoadsUpFront) {
  const absl::Status s = load_reduce_kernels();
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST_F(GpuReduce, EqualsTheHostKernelsBitForBit) {
  std::mt19937_64 rng(20261203);
  for (int t = 0; t < kNumDataTypes; ++t) {
    const auto type = static_cast<DataType>(t);
    const size_t e = size_of(type);
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto op = static_cast<ReduceOp>(o);
      for (size_t count : kCounts) {
        for (Layout layout : kLayouts) {
          SCOPED_TRACE(::testing::Message() << name_of(type) << " " << name_of(op) << " count "
                                            << count << " " << name_of(layout));
          const size_t bytes = count * e;
          const size_t shift = layout == Layout::kOffAlignment ? e : 0;  // one element off 16 B
          const size_t shift_b = layout == Layout::kMixedAlignment ? e : shift;
          std::vector<std::byte> a = random_bytes(bytes, rng), b = random_bytes(bytes, rng);
          std::vector<std::byte> want(bytes);
          reduce_fn(type, op)(want.data(), a.data(), b.data(), count);

          GpuBuffer da(bytes + 16), db(bytes + 16), dout(bytes + 16);
          ASSERT_TRUE(da.ok() && db.ok() && dout.ok());
          std::byte* pa = da.get() + shift;
          std::byte* pb = db.get() + shift_b;
          std::byte* pout = layout == Layout::kInPlace         ? pa
                            : layout == Layout::kInPlaceSecond ? pb
                                                               : dout.get() + shift;
          WEFT_CUDA_OK(cudaMemcpy(pa, a.data(), bytes, cudaMemcpyHostToDevice));
          WEFT_CUDA_OK(cudaMemcpy(pb, b.data(), bytes, cudaMemcpyHostToDevice));
          ASSERT_TRUE(reduce_on_device(pout, pa, pb, count, type, op, nullptr).ok());
          WEFT_CUDA_OK(cudaDeviceSynchronize());
          std::vector<std::byte> got(bytes);
          WEFT_CUDA_OK(cudaMemcpy(got.data(), pout, bytes, cudaMemcpyDeviceToHost));
          const bool any_nan = op == ReduceOp::kSum || op == ReduceOp::kProd || op == ReduceOp::kAvg;
          EXPECT_EQ(first_difference(type, got.data(), want.data(), count, any_nan), -1);
        }
      }
    }
  }
}

TEST_F(GpuReduce, AveragesAsTheHostDoes) {
  std::mt19937_64 rng(7);
  for (int t = 0; t < kNumDataTypes; ++t) {
    const auto type = static_cast<DataType>(t);
    for (int nranks : {2, 3, 7, 300}) {
      for (size_t count : {size_t{1}, size_t{17}, size_t{65537}}) {
        SCOPED_TRACE(::testing::Message() << name_of(type) << " / " << nranks << " count " << count);
        const size_t bytes = count * size_of(type);
        std::vector<std::byte> want = random_bytes(bytes, rng);
        GpuBuffer d(bytes);
        ASSERT_TRUE(d.ok());
        WEFT_CUDA_OK(cudaMemcpy(d.get(), want.data(), bytes, cudaMemcpyHostToDevice));
        finish_average(want.data(), count, type, nranks);
        ASSERT_TRUE(finish_average_on_device(d.get(), count, type, nranks, nullptr).ok());
        std::vector<std::byte> got(bytes);
        WEFT_CUDA_OK(cudaMemcpy(got.data(), d.get(), bytes, cudaMemcpyDeviceToHost));
        EXPECT_EQ(first_difference(type, got.data(), want.data(), count, /*any_nan=*/true), -1);
      }
    }
  }
}

TEST_F(GpuReduce, DeviceMemoryIsSeenAsDevice) {
  GpuBuffer d(64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(device::memory_kind(d.get()), device::MemoryKind::kDevice);
  std::vector<float> host(4);
  EXPECT_EQ(device::memory_kind(host.data()), device::MemoryKind::kHost);
  EXPECT_TRUE(device::either_on_device(host.data(), d.get()));
  EXPECT_FALSE(device::either_on_device(host.data(), nullptr));
}

}  // namespace
}  // namespace weft
