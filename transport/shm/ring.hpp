// A one-way byte ring in a POSIX shared-memory segment: the receiver creates it, the sender
// attaches to it. Head and tail are free-running byte counters on their own cache lines, so
// the fast path is a memcpy and one release store, with no system call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/deadline.hpp"
#include "transport/transport.hpp"

namespace weft::transport::shm {

/// The segment's first page. Lives in shared memory: only trivially copyable members.
struct RingHeader {
  static constexpr uint32_t kMagic = 0x77656674;  // "weft"
  static constexpr uint32_t kVersion = 1;
  // State bits, set once each.
  static constexpr uint32_t kReady = 1;           // receiver has initialised the ring
  static constexpr uint32_t kAttached = 2;        // sender has mapped it
  static constexpr uint32_t kSenderClosed = 4;    // sender will write no more
  static constexpr uint32_t kReceiverClosed = 8;  // receiver will read no more

  uint32_t magic;
  uint32_t version;
  uint64_t capacity;  // bytes of data, a power of two
  int32_t receiver_pid;
  int32_t sender_pid;
  alignas(64) std::atomic<uint32_t> state;
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written; only the sender stores
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever consumed; only the receiver stores
};
static_assert(sizeof(RingHeader) <= 4096);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

/// One end of a ring: mapped in this process, unmapped on destruction.
class Ring {
 public:
  /// Receiver side: creates, sizes and pre-faults the segment `name`.
  static absl::StatusOr<Ring> create(const std::string& name, size_t capacity);
  /// Sender side: waits (by `deadline`) until the receiver has created `name`, then maps it.
  static absl::StatusOr<Ring> attach(const std::string& name, Deadline deadline);

  Ring(Ring&& other) noexcept;
  Ring& operator=(Ring&& other) = delete;
  ~Ring();

  /// Copies up to `len` bytes in; returns how many fit.
  size_t write(const std::byte* data, size_t len);
  /// Hands up to `max` readable bytes to `sink` (two calls when they wrap); returns the count.
  size_t read(size_t max, Sink sink);
  /// Bytes written and not yet read.
  uint64_t readable() const;

  /// Removes the segment's name (the receiver does this once the sender has attached, so a
  /// crash later leaves nothing in /dev/shm). Also done on destruction if not yet done.
  void unlink();

  RingHeader& header() { return *header_; }
  const std::string& name() const { return name_; }

 private:
  Ring(std::string name, void* base, size_t mapped_bytes);

  std::string name_;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  RingHeader* header_ = nullptr;
  std::byte* data_ = nullptr;
  bool owns_name_ = false;  // created here and not yet unlinked
  uint64_t mask_ = 0;
  // Each side's own counter, cached: only that side writes it.
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
};

}  // namespace weft::transport::shm
