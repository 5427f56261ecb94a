// A one-way byte stream in a POSIX shared-memory segment: one process creates it, the other
// attaches to it (either may be the sender).
//
// The stream is a ring of 64-byte cells, read in order. A cell carries up to 56 bytes inline
// next to its tag, or describes the next stretch of a separate bulk ring. The receiver polls
// the next cell's tag, so a small message costs one cache line crossing cores (data and
// flag travel together), and a large one a memcpy into the bulk ring and one cell. The
// consumer's progress (cells, bulk bytes) sits on its own cache lines and the producer reads
// it only when it runs short of space. No system call on any path.
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
  static constexpr uint32_t kVersion = 2;
  // State bits, set once each.
  static constexpr uint32_t kReady = 1;           // the creator has initialised the ring
  static constexpr uint32_t kAttached = 2;        // the other process has mapped it
  static constexpr uint32_t kSenderClosed = 4;    // sender will write no more
  static constexpr uint32_t kReceiverClosed = 8;  // receiver will read no more

  uint32_t magic;
  uint32_t version;
  uint64_t cells;          // number of cells, a power of two
  uint64_t bulk_capacity;  // bytes of the bulk ring, a power of two
  alignas(64) std::atomic<uint32_t> state;
  alignas(64) std::atomic<uint64_t> cells_read;  // cells ever consumed; receiver stores
  alignas(64) std::atomic<uint64_t> bulk_read;   // bulk bytes ever consumed; receiver stores
};
static_assert(sizeof(RingHeader) <= 4096);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

/// One cell: the tag is written last (release) and read first (acquire). Tag bits: the
/// cell's sequence number (index + 1, low 32 bits) << 32 | kind << 31 | byte count.
struct alignas(64) Cell {
  static constexpr size_t kInlineBytes = 56;
  static constexpr uint64_t kBulk = uint64_t{1} << 31;
  std::byte payload[kInlineBytes];
  std::atomic<uint64_t> tag;
};
static_assert(sizeof(Cell) == 64);

/// One end of a ring: mapped in this process, unmapped on destruction.
class Ring {
 public:
  /// Creates, sizes and pre-faults the segment `name` with a bulk ring of `bulk_bytes`.
  static absl::StatusOr<Ring> create(const std::string& name, size_t bulk_bytes);
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
  /// Hands up to `max` readable bytes to `sink`; returns the count.
  size_t read(size_t max, Sink sink);
  /// Whether a written cell is waiting to be read.
  bool readable() const;

  RingHeader& header() { return *header_; }
  const std::string& name() const { return name_; }

 private:
  Ring(std::string name, void* base, size_t mapped_bytes);
  void map_layout();  // sets cells_, bulk_ and the masks from the header
  void release();     // unmaps (and removes the name if nobody attached)
  uint64_t tag_for(uint64_t index, uint64_t kind, size_t bytes) const {
    return ((index + 1) << 32) | kind | bytes;
  }
  bool written(uint64_t index, uint64_t tag) const { return (tag >> 32) == ((index + 1) & 0xffffffffu); }

  std::string name_;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  bool created_ = false;  // this process made the segment (and removes its name if unused)
  RingHeader* header_ = nullptr;
  Cell* cells_ = nullptr;
  std::byte* bulk_ = nullptr;
  uint64_t cell_mask_ = 0;
  uint64_t bulk_mask_ = 0;
  // This side's progress. The sender also keeps its last view of the receiver's progress;
  // the receiver keeps how much of the current cell it has handed out.
  uint64_t cells_done_ = 0;  // sender: cells written; receiver: cells consumed
  uint64_t bulk_done_ = 0;   // sender: bulk bytes written; receiver: bulk bytes consumed
  uint64_t peer_cells_ = 0;  // sender: receiver's cells_read, as last read
  uint64_t peer_bulk_ = 0;   // sender: receiver's bulk_read, as last read
  size_t cell_offset_ = 0;   // receiver: bytes of the current cell already handed out
};

}  // namespace weft::transport::shm
