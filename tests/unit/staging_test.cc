// The host fallback for device buffers, where there is no GPU: host memory stands in for the
// device's and a thread's copies for CUDA's (WEFT_DEVICE_STAND_IN), under the same suite the
// GPU runs (tests/unit/staged_suite.hpp). Small pieces, so most calls are cut into many.
#include <cstring>
#include <memory>
#include <vector>

#include "src/device/copier.hpp"
#include "tests/unit/staged_suite.hpp"

namespace weft::testing {
namespace {

// Host buffers, kept until the rank's suite ends; writes and reads are plain copies.
class HostMemory {
 public:
  std::byte* alloc(size_t bytes) {
    buffers_.emplace_back(new std::byte[bytes + 1]);  // +1: a zero-length buffer is not null
    return buffers_.back().get();
  }
  void fill(std::byte* at, int byte, size_t bytes) { std::memset(at, byte, bytes); }
  // An empty vector's data() may be null, which memcpy may not be given even for 0 bytes.
  void put(std::byte* at, const void* from, size_t bytes) {
    if (bytes > 0) std::memcpy(at, from, bytes);
  }
  void get(void* to, const std::byte* at, size_t bytes) {
    if (bytes > 0) std::memcpy(to, at, bytes);
  }
  void* stream() { return nullptr; }

 private:
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
};

// Host buffers written and read through a stand-in stream, as GpuMemory (tests/gpu/) does
// through a CUDA stream: every call is ordered on the stream and returns at once
// (src/engine.hpp), so a call that ran before the stream reached it reads stale inputs, and
// a result read before the call released the stream is wrong.
class StreamMemory : public HostMemory {
 public:
  void fill(std::byte* at, int byte, size_t bytes) {
    stream_.enqueue([=] { std::memset(at, byte, bytes); });
  }
  void put(std::byte* at, const void* from, size_t bytes) {
    std::vector<std::byte> copy(static_cast<const std::byte*>(from),
                                static_cast<const std::byte*>(from) + bytes);
    stream_.enqueue([at, copy = std::move(copy)] {
      if (!copy.empty()) std::memcpy(at, copy.data(), copy.size());
    });
  }
  void get(void* to, const std::byte* at, size_t bytes) {
    stream_.enqueue([=] {
      if (bytes > 0) std::memcpy(to, at, bytes);
    });
    stream_.synchronize();
  }
  void* stream() { return &stream_; }

 private:
  device::StandInStream stream_;
};

class Staging : public ::testing::TestWithParam<int> {};

TEST_P(Staging, CollectivesStagedThroughHostBuffersAreExact) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  ScopedEnv piece("WEFT_STAGING_BYTES", "4096");
  run_staged_suite<HostMemory>(GetParam());
}

TEST_P(Staging, CollectivesOrderedOnAStreamAreExact) {
  ScopedEnv stand_in("WEFT_DEVICE_STAND_IN", "on");
  ScopedEnv piece("WEFT_STAGING_BYTES", "4096");
  run_staged_suite<StreamMemory>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Ranks, Staging, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace weft::testing
