// copier.hpp over CUDA: a non-blocking stream of the copier's own, events as marks, pinned
// host buffers. Every wait polls an event against its deadline: no CUDA call here blocks.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>

#include <cstring>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/device/copier.hpp"
#include "src/device/device.hpp"

namespace weft::device {
namespace {

absl::Status cuda_error(cudaError_t e, const char* what) {
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

// Polls `event` until it has happened, CUDA reports an error, or the deadline.
absl::Status wait_event(cudaEvent_t event, Deadline deadline, const char* what) {
  Backoff backoff;
  for (;;) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return cuda_error(e, what);
    if (deadline.expired()) {
      return absl::DeadlineExceededError(absl::StrCat(what, " did not finish by the deadline"));
    }
    backoff.pause();
  }
}

// Makes `device` current for a scope: the copier's stream and events live on the device
// that was current when it opened, whichever device the calling thread has now.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    if (cudaGetDevice(&before_) == cudaSuccess && before_ != device) {
      if (cudaSetDevice(device) == cudaSuccess) switched_ = true;
    }
  }
  ~OnDevice() {
    if (switched_) cudaSetDevice(before_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int before_ = 0;
  bool switched_ = false;
};

class CudaCopier : public Copier {
 public:
  ~CudaCopier() override {
    OnDevice on(device_);
    if (done_ != nullptr) release(issued_);  // no stream waits on a copier that is gone
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);  // no copy may still use a buffer freed below
      cudaStreamDestroy(stream_);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (const auto& [m, e] : marks_) cudaEventDestroy(e);
    for (std::byte* b : buffers_) cudaFreeHost(b);
  }

  absl::Status open() {
    if (auto s = require_gpu("copying device buffers to and from the host"); !s.ok()) return s;
    if (cudaError_t e = cudaGetDevice(&device_); e != cudaSuccess) return cuda_error(e, "cudaGetDevice");
    int max_pitch = 0;
    if (cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device_) == cudaSuccess && max_pitch > 0) {
      max_pitch_ = static_cast<size_t>(max_pitch);
    }
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess) {
      stream_ = nullptr;
      return cuda_error(e, "creating the staging copies' stream");
    }
    return absl::OkStatus();
  }

  absl::Status copy(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t height) override {
    OnDevice on(device_);
    // One 2-D copy where CUDA takes the pitches (it refuses one above cudaDevAttrMaxPitch, a
    // block of 2 GiB or more), else a copy per row.
    if (height > 1 && dst_pitch <= max_pitch_ && src_pitch <= max_pitch_) {
      const cudaError_t e = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                              cudaMemcpyDefault, stream_);
      return e == cudaSuccess ? absl::OkStatus() : cuda_error(e, "queueing a staging copy");
    }
    for (size_t row = 0; row < height; ++row) {
      const cudaError_t e =
          cudaMemcpyAsync(static_cast<std::byte*>(dst) + row * dst_pitch,
                          static_cast<const std::byte*>(src) + row * src_pitch, width,
                          cudaMemcpyDefault, stream_);
      if (e != cudaSuccess) return cuda_error(e, "queueing a staging copy");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> mark() override {
    OnDevice on(device_);
    auto event = take_event();
    if (!event.ok()) return event.status();
    if (cudaError_t e = cudaEventRecord(*event, stream_); e != cudaSuccess) {
      give_event(*event);
      return cuda_error(e, "marking the staging copies");
    }
    marks_.emplace_back(++marked_, *event);
    return marked_;
  }

  absl::Status wait(uint64_t mark, Deadline deadline) override {
    OnDevice on(device_);
    while (!marks_.empty() && marks_.front().first <= mark) {
      if (auto s = wait_event(marks_.front().second, deadline, "copying between device and host");
          !s.ok()) {
        return s;
      }
      give_event(marks_.front().second);
      marks_.pop_front();
    }
    return absl::OkStatus();
  }

  absl::Status wait_for_stream(void* stream, Deadline deadline) override {
    OnDevice on(device_);
    auto event = take_event();
    if (!event.ok()) return event.status();
    absl::Status s = absl::OkStatus();
    if (cudaError_t e = cudaEventRecord(*event, static_cast<cudaStream_t>(stream)); e != cudaSuccess) {
      s = cuda_error(e, "marking the caller's stream (is it a stream of the current device?)");
    } else {
      s = wait_event(*event, deadline, "the work queued on the caller's stream before the call");
    }
    give_event(*event);
    return s;
  }

  absl::StatusOr<Ticket> hold(void* stream) override {
    OnDevice on(device_);
    if (auto s = open_holds(); !s.ok()) return s;
    auto event = take_event();
    if (!event.ok()) return event.status();
    auto* caller = static_cast<cudaStream_t>(stream);
    if (cudaError_t e = cudaEventRecord(*event, caller); e != cudaSuccess) {
      give_event(*event);
      return cuda_error(e, "marking the caller's stream (is it a stream of the current device?)");
    }
    const uint32_t number = issued_ + 1;
    // GEQ compares cyclically: (int32_t)(*done - number) >= 0.
    if (CUresult r = wait_value_(reinterpret_cast<CUstream>(caller), done_device_, number,
                                 CU_STREAM_WAIT_VALUE_GEQ);
        r != CUDA_SUCCESS) {
      give_event(*event);  // recorded, harmlessly: the next record replaces it
      return absl::InternalError(absl::StrCat(
          "cuStreamWaitValue32 on the caller's stream failed (CUresult ", static_cast<int>(r),
          "): does this GPU support stream memory operations?"));
    }
    issued_ = number;
    return Ticket{number, *event};
  }

  absl::Status wait_ready(const Ticket& ticket, Deadline deadline) override {
    OnDevice on(device_);
    auto* event = static_cast<cudaEvent_t>(ticket.ready);
    absl::Status s = wait_event(event, deadline, "the work queued on the caller's stream before the call");
    give_event(event);
    return s;
  }

  void release(uint32_t number) override {
    if (done_ == nullptr) return;
    // The GPU reads the word over the bus: the store must reach memory, and after every
    // store of the call's results (the copier's own stream finished those already).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *static_cast<volatile uint32_t*>(done_) = number;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  absl::StatusOr<std::byte*> host_buffer(size_t bytes) override {
    OnDevice on(device_);
    void* p = nullptr;
    if (cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable); e != cudaSuccess) {
      return cuda_error(e, "pinning host memory for staging (WEFT_STAGING_BYTES)");
    }
    std::memset(p, 0, bytes);
    buffers_.push_back(static_cast<std::byte*>(p));
    return buffers_.back();
  }

 private:
  absl::StatusOr<cudaEvent_t> take_event() {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess) {
      return cuda_error(err, "creating a CUDA event");
    }
    return e;
  }
  void give_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(events_mu_);
    free_events_.push_back(e);
  }

  // The word streams wait on (hold): mapped pinned memory the host writes and the GPU reads,
  // and the driver's stream wait, found through the runtime so that nothing links libcuda.
  absl::Status open_holds() {
    if (done_ != nullptr) return absl::OkStatus();
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000,
                                                         cudaEnableDefault, &found);
        e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
      return absl::FailedPreconditionError(
          "this CUDA driver offers no cuStreamWaitValue32 (stream memory operations), which "
          "calls ordered on a stream need; update the NVIDIA driver");
    }
    void* word = nullptr;
    if (cudaError_t e = cudaHostAlloc(&word, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
        e != cudaSuccess) {
      return cuda_error(e, "pinning the word streams wait on");
    }
    void* on_device = nullptr;
    if (cudaError_t e = cudaHostGetDevicePointer(&on_device, word, 0); e != cudaSuccess) {
      cudaFreeHost(word);
      return cuda_error(e, "mapping the word streams wait on");
    }
    *static_cast<volatile uint32_t*>(word) = 0;
    wait_value_ = reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(fn);
    done_device_ = reinterpret_cast<CUdeviceptr>(on_device);
    done_ = static_cast<uint32_t*>(word);
    return absl::OkStatus();
  }

  int device_ = 0;
  size_t max_pitch_ = 0;  // 0 until asked: every copy then goes a row at a time
  cudaStream_t stream_ = nullptr;
  uint64_t marked_ = 0;
  std::deque<std::pair<uint64_t, cudaEvent_t>> marks_;  // not yet waited for, in order
  std::mutex events_mu_;
  std::vector<cudaEvent_t> free_events_;  // under events_mu_
  std::vector<std::byte*> buffers_;
  // hold()'s: null until the first. Never freed: a stream may still be reading it when the
  // copier goes, and it is 4 bytes per communicator that ordered calls on a stream.
  uint32_t* done_ = nullptr;
  CUdeviceptr done_device_ = 0;
  PFN_cuStreamWaitValue32_v11070 wait_value_ = nullptr;
  uint32_t issued_ = 0;  // the caller's thread alone (hold)
};

}  // namespace

absl::StatusOr<std::unique_ptr<Copier>> cuda_copier() {
  auto c = std::make_unique<CudaCopier>();
  if (auto s = c->open(); !s.ok()) return s;
  return std::unique_ptr<Copier>(std::move(c));
}

}  // namespace weft::device
