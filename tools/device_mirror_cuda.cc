// DeviceMirror on a GPU: cudaMalloc'd buffers and a stream of the bench's own, on the device
// this rank picks. The bench is linked with libweft's internals, so these calls reach the
// same (static) CUDA runtime as weft's, and the stream is one weft's calls can be ordered on.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tools/device_mirror.hpp"

namespace weft::tools {
namespace {

absl::Status cuda_error(const char* what, cudaError_t e) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

class GpuMirror : public DeviceMirror {
 public:
  explicit GpuMirror(absl::Duration timeout) : timeout_(timeout) {}
  ~GpuMirror() override {
    // cudaFree waits for the whole device: after a call that never completed it would wait
    // for ever, so the buffers are then left to the process's end.
    if (stream_ != nullptr && !synchronize().ok()) return;
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaFree(send_);
    cudaFree(recv_);
  }

  absl::Status open(size_t bytes, int local_rank) {
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      return cuda_error("cudaGetDeviceCount", e);
    }
    device_ = local_rank % count;
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess) name_ = prop.name;
    void* send = nullptr;
    void* recv = nullptr;
    if (cudaError_t e = cudaMalloc(&send, bytes); e != cudaSuccess) {
      return cuda_error(absl::StrCat("cudaMalloc of ", bytes, " bytes (lower -e)").c_str(), e);
    }
    send_ = static_cast<std::byte*>(send);
    if (cudaError_t e = cudaMalloc(&recv, bytes); e != cudaSuccess) {
      return cuda_error(absl::StrCat("cudaMalloc of ", bytes, " bytes (lower -e)").c_str(), e);
    }
    recv_ = static_cast<std::byte*>(recv);
    bytes_ = bytes;
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess) {
      return cuda_error("cudaStreamCreate", e);
    }
    // Written once, so that nothing is first touched inside a timed call; on the stream, so
    // that no later copy on it can pass the writes (a non-blocking stream does not wait for
    // the legacy default stream).
    if (cudaError_t e = cudaMemsetAsync(send_, 0, bytes, stream_); e != cudaSuccess) {
      return cuda_error("cudaMemset", e);
    }
    if (cudaError_t e = cudaMemsetAsync(recv_, 0, bytes, stream_); e != cudaSuccess) {
      return cuda_error("cudaMemset", e);
    }
    return synchronize();
  }

  std::string describe() const override {
    return absl::StrCat("device memory of GPU ", device_, " (", name_, "), on a stream of the bench's");
  }
  bool on_gpu() const override { return true; }
  void* stream() override { return stream_; }
  absl::Status synchronize() override {
    // Polled rather than cudaStreamSynchronize, which has no deadline: a library's call that
    // never completes (a rank gone) must end the bench with an error.
    const absl::Time deadline = absl::Now() + timeout_;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return cuda_error("the bench's stream", e);
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the bench's stream did not finish within WEFT_TIMEOUT (",
            absl::FormatDuration(timeout_), "): a call on it never completed; is a rank gone?"));
      }
    }
  }

 protected:
  absl::Status copy(void* dst, const void* src, size_t bytes) override {
    // On the bench's stream, after the calls queued there, and waited for.
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_);
    return e == cudaSuccess ? synchronize() : cuda_error("cudaMemcpy", e);
  }

 private:
  const absl::Duration timeout_;
  int device_ = 0;
  std::string name_ = "unnamed";
  cudaStream_t stream_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMirror>> open_gpu_mirror(size_t bytes, int local_rank,
                                                               absl::Duration timeout) {
  auto m = std::make_unique<GpuMirror>(timeout);
  if (absl::Status s = m->open(bytes, local_rank); !s.ok()) return s;
  return std::unique_ptr<DeviceMirror>(std::move(m));
}

}  // namespace weft::tools
