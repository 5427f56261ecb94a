// Copies between device and host memory for the host fallback (src/staging.hpp): one queue
// of copies that run in order off the caller's thread (on the GPU, a CUDA stream of weft's
// own), marks in that queue the host waits for, and the host buffers the copies go through
// (pinned for CUDA, so that the copies are the GPU's DMA and need no CPU). For calls ordered
// on the caller's stream the copies go on that stream instead, between writes and waits of
// words the engine shares with it (mapped pinned memory for CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "src/base/deadline.hpp"

namespace weft::device {

/// The words through which a caller's stream and a communicator's engine order a call
/// (src/engine.hpp), each holding a piece number (compared cyclically, as CUDA's stream waits
/// do): kIn, the last piece the stream copied in; kDone, the last the engine ran; kOut, the
/// last the stream copied out. And kStop, nonzero once a call failed: the engine writes it
/// before it lets the stream go on past the call, and the copies into this rank's cuda_ipc
/// window (copy_unless_stopped_on) are skipped from then on, so that a rank that failed never
/// overwrites a slot a peer whose call succeeded may still be reading.
enum class Word { kIn = 0, kDone = 1, kOut = 2, kStop = 3 };
inline constexpr int kWords = 4;

/// Whether word value `value` has reached `number`, cyclically: (int32_t)(value - number) >= 0.
inline bool reached(uint32_t value, uint32_t number) {
  return static_cast<int32_t>(value - number) >= 0;
}

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
  /// For a call ordered on the caller's `stream` (a cudaStream_t; null: the default stream),
  /// queued on that stream after the work the caller queued before (src/engine.hpp): a copy
  /// as copy() describes; a write of `value` into `word` once everything before it on the
  /// stream is done (its copies visible); a wait, holding the stream's later work, until
  /// `word` reaches `value`. These run on the caller's thread.
  /// Whether a call may be ordered on `stream`: an error while the stream is being captured
  /// into a CUDA graph (a replay would run the stream's waits without the call's collective).
  virtual absl::Status check_stream(void* stream) { return absl::OkStatus(); }
  virtual absl::Status copy_on(void* stream, void* dst, size_t dst_pitch, const void* src,
                               size_t src_pitch, size_t width, size_t height) = 0;
  /// As copy_on, unless kStop is nonzero when the stream gets there (a kernel that reads it
  /// first, on a GPU).
  virtual absl::Status copy_unless_stopped_on(void* stream, void* dst, size_t dst_pitch,
                                              const void* src, size_t src_pitch, size_t width,
                                              size_t height) = 0;
  virtual absl::Status signal_on(void* stream, Word word, uint32_t value) = 0;
  virtual absl::Status wait_on(void* stream, Word word, uint32_t value) = 0;
  /// The host's side of the words (the engine's thread): the value now, and a write that
  /// streams waiting on the word see, after every write the host made before it.
  virtual uint32_t read(Word word) = 0;
  virtual void write(Word word, uint32_t value) = 0;
  /// `bytes` of host memory the copies reach directly, touched once; it lives as long as the
  /// copier.
  virtual absl::StatusOr<std::byte*> host_buffer(size_t bytes) = 0;
  /// `bytes` of device memory (standing in: host memory), not cleared; it lives as long as
  /// the copier.
  virtual absl::StatusOr<std::byte*> device_buffer(size_t bytes) = 0;

  /// Memory that other processes of this host map by its handle (transport/cuda_ipc/): device
  /// memory exported as a POSIX descriptor (cuda_shared.hpp), or, standing in, a memfd, which
  /// the owner hands to peers while it holds an FdPost (shared_fd.hpp). Not cleared. It lives as long as
  /// the copier, and in each peer that mapped it as long as the peer's copier.
  struct Shared {
    std::byte* data = nullptr;
    std::string handle;  ///< printable; what open_shared() takes
  };
  virtual absl::StatusOr<Shared> share_memory(size_t bytes) = 0;
  /// Maps memory another rank's copier shared (by its handle) into this process, until the
  /// copier goes. An error where it cannot be reached from here (no peer access between the
  /// GPUs, another user's process), which the caller answers by staging through the host.
  virtual absl::StatusOr<std::byte*> open_shared(std::string_view handle, size_t bytes) = 0;
  /// Unmaps `data`, which share_memory or open_shared gave and no work queued here still
  /// uses, before the copier goes; what this process exported for its peers goes with it
  /// (a peer's mapping stays: the memory lives until its last mapping goes).
  virtual void release_shared(std::byte* data) = 0;
};

/// The engine's wait for a stream (src/engine.hpp): returns once `word` has reached `number`,
/// polling with a backoff; at the deadline, an error that says the stream was `what`.
absl::Status await_word(Copier& copier, Word word, uint32_t number, const Deadline& deadline,
                        std::string_view what);

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
