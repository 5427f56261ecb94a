// DeviceMirror on a GPU: cudaMalloc'd buffers and a stream of the bench's own, on the device
// this rank picks. The bench is linked with libweft's internals, so these calls reach the
// same (static) CUDA runtime as weft's, and the stream is one weft's calls can be ordered on.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "tools/device_mirror.hpp"

namespace weft::tools {
namespace {

absl::Status cuda_error(const char* what, cudaError_t e) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

class GpuMirror : public DeviceMirror {
 public:
  ~GpuMirror() override {
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
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
    // Written once, so that nothing is first touched inside a timed call.
    if (cudaError_t e = cudaMemset(send_, 0, bytes); e != cudaSuccess) return cuda_error("cudaMemset", e);
    if (cudaError_t e = cudaMemset(recv_, 0, bytes); e != cudaSuccess) return cuda_error("cudaMemset", e);
    return absl::OkStatus();
  }

  std::string describe() const override {
    return absl::StrCat("device memory of GPU ", device_, " (", name_, "), on a stream of the bench's");
  }
  bool on_gpu() const override { return true; }
  void* stream() override { return stream_; }
  absl::Status synchronize() override {
    cudaError_t e = cudaStreamSynchronize(stream_);
    return e == cudaSuccess ? absl::OkStatus() : cuda_error("cudaStreamSynchronize", e);
  }

 protected:
  absl::Status copy(void* dst, const void* src, size_t bytes) override {
    // On the bench's stream, after the calls queued there, and waited for.
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    return e == cudaSuccess ? absl::OkStatus() : cuda_error("cudaMemcpy", e);
  }

 private:
  int device_ = 0;
  std::string name_ = "unnamed";
  cudaStream_t stream_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMirror>> open_gpu_mirror(size_t bytes, int local_rank) {
  auto m = std::make_unique<GpuMirror>();
  if (absl::Status s = m->open(bytes, local_rank); !s.ok()) return s;
  return std::unique_ptr<DeviceMirror>(std::move(m));
}

}  // namespace weft::tools
