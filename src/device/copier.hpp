// Copies between device and host memory for the host fallback (src/staging.hpp): one queue
// of copies that run in order off the caller's thread (on the GPU, a CUDA stream of weft's
// own), marks in that queue the host waits for, and the host buffers the copies go through
// (pinned for CUDA, so that the copies are the GPU's DMA and need no CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "src/base/deadline.hpp"

namespace weft::device {

/// A call's place on the caller's stream (Copier::hold): the point its inputs are ready at,
/// and the number the stream waits for before it runs what was queued after the call.
struct Ticket {
  uint32_t number = 0;
  void* ready = nullptr;  ///< the copier's mark of that point (a cudaEvent_t for CUDA's)
};

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
  /// For a call that returns before it ran (src/engine.hpp), on the caller's thread: marks
  /// the point `stream` has reached (the call's inputs are ready once it passes it) and makes
  /// the stream wait there, before anything queued on it later, until release() reaches the
  /// ticket's number. Numbers grow by one per ticket. Thread-safe against the calls below.
  virtual absl::StatusOr<Ticket> hold(void* stream) = 0;
  /// Returns once the ticket's stream passed its mark; an error at the deadline.
  virtual absl::Status wait_ready(const Ticket& ticket, Deadline deadline) = 0;
  /// Lets every stream held by a ticket numbered up to `number` go on; numbers compare
  /// cyclically, as CUDA's stream waits do.
  virtual void release(uint32_t number) = 0;
  /// `bytes` of host memory the copies reach directly, touched once; it lives as long as the
  /// copier.
  virtual absl::StatusOr<std::byte*> host_buffer(size_t bytes) = 0;
};

/// The copier over CUDA: a stream of its own on the current device and pinned host buffers.
/// An error where this process can use no GPU.
absl::StatusOr<std::unique_ptr<Copier>> cuda_copier();

/// Host memory standing in for device memory: the copies run in order on a thread of the
/// copier's own, as a stream's would, so that the staging pipeline's overlap and waits are
/// tested where there is no GPU (WEFT_DEVICE_STAND_IN). Its streams are StandInStreams.
std::unique_ptr<Copier> stand_in_copier();

/// A CUDA stream's stand-in (WEFT_DEVICE_STAND_IN): work runs in order on a thread of its
/// own. Its address goes where a cudaStream_t would; a NULL stream, standing in, means a
/// call that returns once its results are in place.
class StandInStream {
 public:
  StandInStream();
  ~StandInStream();  ///< runs what is queued, then stops
  StandInStream(const StandInStream&) = delete;
  StandInStream& operator=(const StandInStream&) = delete;

  /// Queues `work` after everything queued before (a kernel, a copy, a wait).
  void enqueue(std::function<void()> work);
  /// Returns once everything queued so far has run (cudaStreamSynchronize).
  void synchronize();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace weft::device
