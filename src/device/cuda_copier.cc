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
#include "src/device/copy_unless.hpp"
#include "src/device/cuda_shared.hpp"
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
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);  // no copy may still use a buffer freed below
      cudaStreamDestroy(stream_);
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (const auto& [m, e] : marks_) cudaEventDestroy(e);
    for (std::byte* b : buffers_) cudaFreeHost(b);
    shared_.reset();  // after the stream: no copy may still use a window
    for (void* p : device_buffers_) cudaFree(p);
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
    return copy_in(stream_, dst, dst_pitch, src, src_pitch, width, height);
  }

  absl::StatusOr<uint64_t> mark() override {
    OnDevice on(device_);
    auto event = take_event();
    if (!event.ok()) return event.status();
    if (cudaError_t e = cudaEventRecord(*event, stream_); e != cudaSuccess) {
      free_events_.push_back(*event);
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
      free_events_.push_back(marks_.front().second);
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
    free_events_.push_back(*event);
    return s;
  }

  absl::Status check_stream(void* stream) override {
    OnDevice on(device_);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t e = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capture);
    if (e == cudaSuccess && capture == cudaStreamCaptureStatusNone) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "the stream is being captured into a CUDA graph",
        e == cudaSuccess ? "" : absl::StrCat(" (", cudaGetErrorName(e), ")"),
        ", and weft cannot be captured yet: a replay would skip the collective. Make weft's "
        "calls outside the captured region"));
  }

  absl::Status copy_on(void* stream, void* dst, size_t dst_pitch, const void* src,
                       size_t src_pitch, size_t width, size_t height) override {
    OnDevice on(device_);
    return copy_in(static_cast<cudaStream_t>(stream), dst, dst_pitch, src, src_pitch, width, height);
  }

  absl::Status copy_unless_stopped_on(void* stream, void* dst, size_t dst_pitch, const void* src,
                                      size_t src_pitch, size_t width, size_t height) override {
    OnDevice on(device_);
    if (auto s = open_words(); !s.ok()) return s;
    const cudaError_t e = copy_unless_on_device(
        reinterpret_cast<const uint32_t*>(word_on_device(Word::kStop)), dst, dst_pitch, src,
        src_pitch, width, height, static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? absl::OkStatus() : cuda_error(e, "launching a copy into cuda_ipc's window");
  }

  // The default write orders itself after everything before it on the stream, and makes
  // those copies' bytes visible first.
  absl::Status signal_on(void* stream, Word word, uint32_t value) override {
    OnDevice on(device_);
    if (auto s = open_words(); !s.ok()) return s;
    const CUresult r = write_value_(reinterpret_cast<CUstream>(stream), word_on_device(word),
                                    value, CU_STREAM_WRITE_VALUE_DEFAULT);
    return r == CUDA_SUCCESS ? absl::OkStatus() : driver_error(r, "cuStreamWriteValue32");
  }

  absl::Status wait_on(void* stream, Word word, uint32_t value) override {
    OnDevice on(device_);
    if (auto s = open_words(); !s.ok()) return s;
    // GEQ compares cyclically: (int32_t)(*word - value) >= 0.
    const CUresult r = wait_value_(reinterpret_cast<CUstream>(stream), word_on_device(word),
                                   value, CU_STREAM_WAIT_VALUE_GEQ);
    return r == CUDA_SUCCESS ? absl::OkStatus() : driver_error(r, "cuStreamWaitValue32");
  }

  uint32_t read(Word word) override {
    if (words_ == nullptr) return 0;
    const uint32_t v = *word_on_host(word);
    std::atomic_thread_fence(std::memory_order_acquire);  // then the stream's copies' bytes
    return v;
  }

  void write(Word word, uint32_t value) override {
    if (words_ == nullptr) return;
    // The stream reads the word over the bus, after every store of the host before it (the
    // piece's results in the pinned buffer).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *word_on_host(word) = value;
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

  absl::StatusOr<std::byte*> device_buffer(size_t bytes) override {
    OnDevice on(device_);
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
      return cuda_error(e, "allocating device memory for cuda_ipc");
    }
    device_buffers_.push_back(p);
    return static_cast<std::byte*>(p);
  }

  absl::StatusOr<Shared> share_memory(size_t bytes) override {
    OnDevice on(device_);
    auto shared = shared_memory().share(bytes);
    if (!shared.ok()) return shared.status();
    return Shared{shared->first, std::move(shared->second)};
  }

  absl::StatusOr<std::byte*> open_shared(std::string_view handle, size_t bytes) override {
    OnDevice on(device_);
    return shared_memory().open(handle, bytes);
  }

  void release_shared(std::byte* data) override {
    OnDevice on(device_);
    shared_memory().release(data);
  }

 private:
  absl::StatusOr<cudaEvent_t> take_event() {
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

  // The words (copier.hpp), each on a cache line of its own in mapped pinned memory the host
  // and the GPU both reach, and the driver's stream memory operations, found through the
  // runtime so that nothing links libcuda. Made at the first call ordered on a stream.
  absl::Status open_words() {
    std::lock_guard<std::mutex> lock(words_mu_);
    if (words_ != nullptr) return absl::OkStatus();
    void* wait = nullptr;
    void* write = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &wait, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || wait == nullptr ||
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &write, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || write == nullptr) {
      return absl::FailedPreconditionError(
          "this CUDA driver offers no cuStreamWaitValue32/cuStreamWriteValue32 (stream memory "
          "operations), which calls ordered on a stream need; update the NVIDIA driver");
    }
    void* words = nullptr;
    if (cudaError_t e = cudaHostAlloc(&words, kWordStride * kWords,
                                      cudaHostAllocMapped | cudaHostAllocPortable);
        e != cudaSuccess) {
      return cuda_error(e, "pinning the words streams and the engine share");
    }
    void* on_device = nullptr;
    if (cudaError_t e = cudaHostGetDevicePointer(&on_device, words, 0); e != cudaSuccess) {
      cudaFreeHost(words);
      return cuda_error(e, "mapping the words streams and the engine share");
    }
    std::memset(words, 0, kWordStride * kWords);
    wait_value_ = reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(wait);
    write_value_ = reinterpret_cast<PFN_cuStreamWriteValue32_v11070>(write);
    words_device_ = reinterpret_cast<CUdeviceptr>(on_device);
    words_ = static_cast<std::byte*>(words);
    return absl::OkStatus();
  }
  volatile uint32_t* word_on_host(Word w) {
    return reinterpret_cast<volatile uint32_t*>(words_ + kWordStride * static_cast<int>(w));
  }
  CUdeviceptr word_on_device(Word w) const {
    return words_device_ + kWordStride * static_cast<int>(w);
  }
  static absl::Status driver_error(CUresult r, const char* what) {
    return absl::InternalError(absl::StrCat(
        what, " on the caller's stream failed (CUresult ", static_cast<int>(r),
        "): is it a stream of the current device, and does this GPU support stream memory "
        "operations?"));
  }
  // One queued copy on `stream`: 2-D where CUDA takes the pitches (it refuses one above
  // cudaDevAttrMaxPitch, a block of 2 GiB or more), else a copy per row.
  absl::Status copy_in(cudaStream_t stream, void* dst, size_t dst_pitch, const void* src,
                       size_t src_pitch, size_t width, size_t height) {
    if (height > 1 && dst_pitch <= max_pitch_ && src_pitch <= max_pitch_) {
      const cudaError_t e = cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                              cudaMemcpyDefault, stream);
      return e == cudaSuccess ? absl::OkStatus() : cuda_error(e, "queueing a staging copy");
    }
    for (size_t row = 0; row < height; ++row) {
      const cudaError_t e =
          cudaMemcpyAsync(static_cast<std::byte*>(dst) + row * dst_pitch,
                          static_cast<const std::byte*>(src) + row * src_pitch, width,
                          cudaMemcpyDefault, stream);
      if (e != cudaSuccess) return cuda_error(e, "queueing a staging copy");
    }
    return absl::OkStatus();
  }

  int device_ = 0;
  size_t max_pitch_ = 0;  // 0 until asked: every copy then goes a row at a time
  cudaStream_t stream_ = nullptr;
  uint64_t marked_ = 0;
  std::deque<std::pair<uint64_t, cudaEvent_t>> marks_;  // not yet waited for, in order
  std::vector<cudaEvent_t> free_events_;
  std::vector<std::byte*> buffers_;
  std::vector<void*> device_buffers_;
  std::unique_ptr<CudaShared> shared_;  // cuda_ipc's windows, ours and peers', once asked for
  CudaShared& shared_memory() {
    if (shared_ == nullptr) shared_ = std::make_unique<CudaShared>(device_);
    return *shared_;
  }
  static constexpr size_t kWordStride = 64;
  std::mutex words_mu_;  // open_words()
  // Null until the first call ordered on a stream. Never freed: a stream may still wait on
  // a word when the copier goes (its engine wrote every number first), and they are 256
  // bytes per communicator.
  std::byte* words_ = nullptr;
  CUdeviceptr words_device_ = 0;
  PFN_cuStreamWaitValue32_v11070 wait_value_ = nullptr;
  PFN_cuStreamWriteValue32_v11070 write_value_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Copier>> cuda_copier() {
  auto c = std::make_unique<CudaCopier>();
  if (auto s = c->open(); !s.ok()) return s;
  return std::unique_ptr<Copier>(std::move(c));
}

}  // namespace weft::device
