// What weft knows of CUDA (src/device/) and the GPU kernels' refusals, on any machine: built
// with or without CUDA, with or without a GPU. Without one, every question has an answer and
// every use of a GPU a clear error. The kernels' results are tests/gpu/'s, where a GPU is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collectives/reduce_device.hpp"
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

  const absl::Status r = reduce_on_device(host.data(), host.data(), host.data(), host.size(),
                                          DataType::kFloat32, ReduceOp::kSum, nullptr);
  EXPECT_EQ(r.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.message()), HasSubstr("a reduction on the GPU"));
  const absl::Status a =
      finish_average_on_device(host.data(), host.size(), DataType::kFloat32, 2, nullptr);
  EXPECT_EQ(a.code(), absl::StatusCode::kFailedPrecondition);
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
