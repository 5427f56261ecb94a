// Copies between device and host memory for the host fallback (src/staging.hpp): one queue
// of copies that run in order off the caller's thread (on the GPU, a CUDA stream of weft's
// own), marks in that queue the host waits for, and the host buffers the copies go through
// (pinned for CUDA, so that the copies are the GPU's DMA and need no CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "src/base/deadline.hpp"

namespace weft::device {

class Copier {
 public:
  virtual ~Copier() = default;
  /// Queues `height` rows of `width` bytes from `src` (rows `src_pitch` apart) to `dst`
  /// (rows `dst_pitch` apart), after everything queued before. Either side may be device or
  /// host memory.
  virtual absl::Status copy(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                            size_t width, size_t height) = 0;
  /// A mark after everything queued so far.
  virtual absl::StatusOr<uint64_t> mark() = 0;
  /// Returns once the queue has passed `mark`; an error at the deadline, or when a copy
  /// failed.
  virtual absl::Status wait(uint64_t mark, Deadline deadline) = 0;
  /// After an error: returns once every copy queued so far has finished (or at the
  /// deadline), so that none still reads or writes a caller's buffer once the call returned.
  absl::Status drain(Deadline deadline) {
    auto m = mark();
    return m.ok() ? wait(*m, deadline) : m.status();
  }
  /// Returns once the work queued on the caller's `stream` (a cudaStream_t; null: the
  /// default stream) before this call has run: a collective's inputs are ready.
  virtual absl::Status wait_for_stream(void* stream, Deadline deadline) = 0;
  /// `bytes` of host memory the copies reach directly, touched once; it lives as long as the
  /// copier.
  virtual absl::StatusOr<std::byte*> host_buffer(size_t bytes) = 0;
};

/// The copier over CUDA: a stream of its own on the current device and pinned host buffers.
/// An error where this process can use no GPU.
absl::StatusOr<std::unique_ptr<Copier>> cuda_copier();

/// Host memory standing in for device memory: the copies run in order on a thread of the
/// copier's own, as a stream's would, so that the staging pipeline's overlap and waits are
/// tested where there is no GPU (WEFT_DEVICE_STAND_IN).
std::unique_ptr<Copier> stand_in_copier();

}  // namespace weft::device
