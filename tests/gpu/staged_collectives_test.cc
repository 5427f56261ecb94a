// Collectives on device buffers through the host fallback on a real GPU: the suite of
// tests/unit/staged_suite.hpp with each rank's buffers in the GPU's memory and its own
// stream, so that the staging copies are CUDA's and every call is ordered after the rank's
// stream. Skips, saying why, where this process can use no GPU.
#include <cuda_runtime.h>

#include <vector>

#include "src/device/device.hpp"
#include "tests/unit/staged_suite.hpp"

namespace weft::testing {
namespace {

// Device buffers and one stream per rank; writes and reads go through that stream.
class GpuMemory {
 public:
  GpuMemory() {
    cudaSetDevice(0);
    EXPECT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  ~GpuMemory() {
    cudaStreamSynchronize(stream_);
    for (void* p : buffers_) cudaFree(p);
    cudaStreamDestroy(stream_);
  }
  std::byte* alloc(size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes + 16), cudaSuccess);
    buffers_.push_back(p);
    return static_cast<std::byte*>(p);
  }
  void fill(std::byte* at, int byte, size_t bytes) {
    EXPECT_EQ(cudaMemsetAsync(at, byte, bytes, stream_), cudaSuccess);
  }
  // Empty vectors may hand over null: those copies are skipped.
  void put(std::byte* at, const void* from, size_t bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMemcpyAsync(at, from, bytes, cudaMemcpyHostToDevice, stream_), cudaSuccess);
    }
  }
  void get(void* to, const std::byte* at, size_t bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMemcpyAsync(to, at, bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    }
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }
  void* stream() { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
  std::vector<void*> buffers_;
};

class StagedOnGpu : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!device::gpus().ok()) GTEST_SKIP() << "no GPU to test on: " << device::gpus().status().message();
  }
};

TEST_P(StagedOnGpu, CollectivesOnDeviceBuffersAreExact) {
  ScopedEnv piece("WEFT_STAGING_BYTES", "65536");
  ScopedEnv timeout("WEFT_TIMEOUT", "60");  // a rank stopped by a failed check ends the rest soon
  run_staged_suite<GpuMemory>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Ranks, StagedOnGpu, ::testing::Values(2, 4));

}  // namespace
}  // namespace weft::testing
