// What weft knows of CUDA (src/device/) and the GPU kernels' refusals, on any machine: built
// with or without CUDA, with or without a GPU. Without one, every question has an answer and
// every use of a GPU a clear error. The kernels' results are tests/gpu/'s, where a GPU is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collectives/reduce_device.hpp"
#include "src/device/copier.hpp"
#include "src/device/device.hpp"

namespace weft {
namespace {

using ::testing::HasSubstr;

TEST(Device, TheBuildSaysWhatItHasOfCuda) {
  const device::CudaBuild& b = device::cuda_build();
#if defined(WEFT_HAVE_CUDA)
  EXPECT_TRUE(b.built);
  EXPECT_THAT(b.toolkit, ::testing::MatchesRegex("[0-9]+\\.[0-9]+.*"));
  for (const char* arch : {"sm_80", "sm_90", "sm_100"}) EXPECT_THAT(b.architectures, HasSubstr(arch));
  EXPECT_THAT(device::describe(), HasSubstr(b.toolkit));
#else
  EXPECT_FALSE(b.built);
  EXPECT_FALSE(device::gpus().ok());
  EXPECT_THAT(std::string(device::gpus().status().message()), HasSubstr("built without CUDA"));
#endif
}

TEST(Device, WithoutAGpuEveryUseSaysWhyAndWhatToDo) {
  if (device::gpus().ok()) GTEST_SKIP() << "this machine has a GPU: " << device::describe();
  const std::string why(device::gpus().status().message());
  EXPECT_THAT(why, ::testing::AnyOf(HasSubstr("driver"), HasSubstr("GPU"), HasSubstr("CUDA")));
  EXPECT_THAT(device::describe(), HasSubstr(why));

  const absl::Status s = device::require_gpu("weftAllReduce");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("weftAllReduce: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr(why));
  EXPECT_THAT(std::string(s.message()), HasSubstr("host buffers"));

  // No pointer can be a device's in a process without a GPU.
  std::vector<float> host(16, 1.0f);
  EXPECT_EQ(device::memory_kind(host.data()), device::MemoryKind::kHost);
  EXPECT_EQ(device::memory_kind(nullptr), device::MemoryKind::kHost);
  EXPECT_FALSE(device::either_on_device(host.data(), nullptr));

  const absl::Status r = reduce_on_device(host.data(), host.data(), host.data(), host.size(),
                                          DataType::kFloat32, ReduceOp::kSum, nullptr);
  EXPECT_EQ(r.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.message()), HasSubstr("a reduction on the GPU"));
  const absl::Status a =
      finish_average_on_device(host.data(), host.size(), DataType::kFloat32, 2, nullptr);
  EXPECT_EQ(a.code(), absl::StatusCode::kFailedPrecondition);
}

// The stand-in copier is what the staging pipeline runs on where there is no GPU
// (WEFT_DEVICE_STAND_IN): rows with their pitches, in order, marks that pass in order.
TEST(Device, TheStandInCopierCopiesRowsInOrderAndPassesMarks) {
  std::unique_ptr<device::Copier> c = device::stand_in_copier();
  auto staged = c->host_buffer(64);
  ASSERT_TRUE(staged.ok());
  std::vector<uint8_t> src(48), dst(48, 0xee);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i);
  // Three rows of 4 bytes, 16 apart in src, packed into the staging buffer, then spread out
  // again 12 apart: row r of dst holds src's row r.
  ASSERT_TRUE(c->copy(*staged, 4, src.data(), 16, 4, 3).ok());
  ASSERT_TRUE(c->copy(dst.data(), 12, *staged, 4, 4, 3).ok());
  auto first = c->mark();
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(c->copy(dst.data() + 44, 0, src.data(), 0, 4, 1).ok());
  auto second = c->mark();
  ASSERT_TRUE(second.ok());
  EXPECT_LT(*first, *second);
  ASSERT_TRUE(c->wait(*second, Deadline::after(absl::Seconds(10))).ok());
  for (size_t row = 0; row < 3; ++row) {
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(dst[row * 12 + i], row * 16 + i) << row << " " << i;
    for (size_t i = 4; i < 12 && row * 12 + i < 44; ++i) EXPECT_EQ(dst[row * 12 + i], 0xee);
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(dst[44 + i], i);
  // A mark not yet made is not passed: the wait ends at its deadline, saying so.
  const absl::Status late = c->wait(*second + 1, Deadline::after(absl::Milliseconds(20)));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(Device, WithoutAGpuTheCudaCopierSaysWhy) {
  if (device::gpus().ok()) GTEST_SKIP() << "this machine has a GPU: " << device::describe();
  auto c = device::cuda_copier();
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(std::string(device::gpus().status().message())));
}

#if defined(WEFT_HAVE_CUDA)
TEST(Device, KernelsRefuseBadArgumentsBeforeTheyAskForAGpu) {
  alignas(16) uint8_t bytes[64] = {};
  // A float one byte off its alignment: a GPU cannot load it.
  const absl::Status misaligned = reduce_on_device(bytes + 1, bytes + 16, bytes + 32, 4,
                                                   DataType::kFloat32, ReduceOp::kSum, nullptr);
  EXPECT_EQ(misaligned.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(misaligned.message()), HasSubstr("the output is not aligned"));
  EXPECT_EQ(reduce_on_device(bytes, bytes, bytes, 1, static_cast<DataType>(77), ReduceOp::kSum, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reduce_on_device(bytes, bytes, bytes, 1, DataType::kInt8, static_cast<ReduceOp>(9), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing to do is done at once, GPU or not.
  EXPECT_TRUE(reduce_on_device(bytes, bytes, bytes, 0, DataType::kInt8, ReduceOp::kMax, nullptr).ok());
}
#endif

}  // namespace
}  // namespace weft
