// A one-way byte ring in a POSIX shared-memory segment: one process creates it, the other
// attaches to it (either may be the sender). Head and tail are free-running byte counters on their own cache lines, so
// the fast path is a memcpy and one release store, with no system call.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
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
  static constexpr uint32_t kReady = 1;           // the creator has initialised the ring
  static constexpr uint32_t kAttached = 2;        // the other process has mapped it
  static constexpr uint32_t kSenderClosed = 4;    // sender will write no more
  static constexpr uint32_t kReceiverClosed = 8;  // receiver will read no more

  uint32_t magic;
  uint32_t version;
  uint64_t capacity;  // bytes of data, a power of two
  alignas(64) std::atomic<uint32_t> state;
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written; only the sender stores
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever consumed; only the receiver stores
};
static_assert(sizeof(RingHeader) <= 4096);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

/// One end of a ring: mapped in this process, unmapped on destruction.
class Ring {
 public:
  /// Creates, sizes and pre-faults the segment `name`.
  static absl::StatusOr<Ring> create(const std::string& name, size_t capacity);
  /// Waits (by `deadline`) until the creator has made `name` ready, maps it and removes the
  /// name: once both processes hold the mapping, a crash leaves nothing in /dev/shm.
  /// `creator_alive` is asked while waiting, so a dead creator fails fast.
  static absl::StatusOr<Ring> attach(const std::string& name, Deadline deadline,
                                     const std::function<bool()>& creator_alive);

  Ring(Ring&& other) noexcept;
  Ring& operator=(Ring&& other) noexcept;
  ~Ring();

  /// Copies up to `len` bytes in; returns how many fit.
  size_t write(const std::byte* data, size_t len);
  /// Hands up to `max` readable bytes to `sink` (two calls when they wrap); returns the count.
  size_t read(size_t max, Sink sink);
  /// Bytes written and not yet read.
  uint64_t readable() const;

  RingHeader& header() { return *header_; }
  const std::string& name() const { return name_; }

 private:
  Ring(std::string name, void* base, size_t mapped_bytes);
  void release();  // unmaps (and removes the name if nobody attached)

  std::string name_;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  RingHeader* header_ = nullptr;
  std::byte* data_ = nullptr;
  bool created_ = false;  // this process made the segment (and removes its name if unused)
  uint64_t mask_ = 0;
  // The sender's head and the receiver's tail, kept here because only that side stores
  // them; on the sender, tail_ is its last view of the receiver's tail.
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
};

}  // namespace weft::transport::shm
