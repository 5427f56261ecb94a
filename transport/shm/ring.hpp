// A one-way byte stream in a POSIX shared-memory segment: one process creates it, the other
// attaches to it (either may be the sender).
//
// The stream is a ring of 64-byte cells, read in order. A cell carries up to 56 bytes inline
// next to its tag, or describes the next stretch of a separate bulk ring. The receiver polls
// the next cell's tag, so a small message costs one cache line crossing cores (data and
// flag travel together), and a large one a memcpy into the bulk ring and one cell. The
// consumer's progress (cells, bulk bytes) sits on its own cache lines and the producer reads
// it only when it runs short of space. No system call on those paths.
//
// Single copy: a large send may instead post an offer cell holding the address of the
// sender's own buffer; the receiver copies straight from it with process_vm_readv (one copy
// instead of two) and publishes how much it has read, which is when the sender's bytes
// count as taken. The receiver first proves it may read the sender's memory (a probe read
// of a known word) and only then lets the sender post offers. That side lives in ring_offer.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "src/base/deadline.hpp"
#include "transport/bulk_pace.hpp"
#include "transport/transport.hpp"

namespace weft::transport::shm {

/// The segment's first page. Lives in shared memory: only trivially copyable members.
struct RingHeader {
  static constexpr uint32_t kMagic = 0x77656674;  // "weft"
  static constexpr uint32_t kVersion = 4;
  // State bits, set once each.
  static constexpr uint32_t kReady = 1;           // the creator has initialised the ring
  static constexpr uint32_t kAttached = 2;        // the other process has mapped it
  static constexpr uint32_t kSenderClosed = 4;    // sender will write no more
  static constexpr uint32_t kReceiverClosed = 8;  // receiver will read no more
  static constexpr uint32_t kSingleCopy = 16;     // receiver can read the sender's memory

  uint32_t magic;
  uint32_t version;
  uint64_t cells;          // number of cells, a power of two
  uint64_t bulk_capacity;  // bytes of the bulk ring, a power of two
  int32_t creator_pid;     // who made it: once that process is gone, the name is stale
  uint64_t creator_pidns;  // the pid namespace that pid means something in (its inode)
  alignas(64) std::atomic<uint32_t> state;
  std::atomic<uint64_t> sender_probe;  // where the sender's process sees `magic`; 0: not yet
  alignas(64) std::atomic<uint64_t> cells_read;  // cells ever consumed; receiver stores
  alignas(64) std::atomic<uint64_t> bulk_read;   // bulk bytes ever consumed; receiver stores
  alignas(64) std::atomic<uint64_t> offer_read;  // offered bytes ever copied; receiver stores
};
static_assert(sizeof(RingHeader) <= 4096);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

/// One cell: the tag is written last (release) and read first (acquire). Tag bits: the
/// cell's sequence number (index + 1, low 32 bits) << 32 | kind (bits 30-31) | byte count.
/// An offer cell's payload starts with the sender's buffer address.
struct alignas(64) Cell {
  static constexpr size_t kInlineBytes = 56;
  static constexpr uint64_t kBulk = uint64_t{1} << 31;
  static constexpr uint64_t kOffer = uint64_t{1} << 30;
  static constexpr uint64_t kBytesMask = kOffer - 1;
  std::byte payload[kInlineBytes];
  std::atomic<uint64_t> tag;
};
static_assert(sizeof(Cell) == 64);

/// This process's pid namespace, as the inode of /proc/self/ns/pid (0 if unknown).
uint64_t own_pid_namespace();

/// One end of a ring: mapped in this process, unmapped on destruction.
class Ring {
 public:
  /// Creates, sizes and pre-faults the segment `name` with a bulk ring of `bulk_bytes`; the
  /// name appears only once the segment is complete (it is made as `name`.making).
  static absl::StatusOr<Ring> create(const std::string& name, size_t bulk_bytes);
  /// Waits (by `deadline`) until the creator has made `name` ready, maps it and removes the
  /// name: once both processes hold the mapping, a crash leaves nothing in /dev/shm.
  /// `creator_alive` is asked while waiting, so a dead creator fails fast.
  static absl::StatusOr<Ring> attach(const std::string& name, Deadline deadline,
                                     const std::function<bool()>& creator_alive);

  Ring(Ring&& other) noexcept;
  Ring& operator=(Ring&& other) noexcept;
  ~Ring();

  /// Sender: takes up to `len` bytes and returns how many it took. Copies them in, or, when
  /// `may_offer`, from `single_copy_from` bytes on (or from BulkPace::kTimedFrom while
  /// copies that large into the ring run slow, transport/bulk_pace.hpp) and once the
  /// receiver allows it, offers them and reports them taken as the receiver reads them; the
  /// caller then calls again with the rest of the same buffer, unchanged, until the offer is
  /// read.
  absl::StatusOr<size_t> write(const std::byte* data, size_t len, bool may_offer);
  /// Sender: as write without offers, for the first `len` bytes of `from`, copied straight
  /// from both of its pieces.
  absl::StatusOr<size_t> write_gathered(const Gather& from, size_t len);
  /// Sender: lets the receiver probe this process and sets the size that makes an offer
  /// (kOffersWhenSlow: only those BulkPace picks).
  void offer_single_copy(size_t single_copy_from);
  static constexpr size_t kOffersWhenSlow = SIZE_MAX;

  /// Receiver: hands up to `max` readable bytes to `sink`; returns the count.
  absl::StatusOr<size_t> read(size_t max, Sink sink);
  /// Receiver: copies up to `max` readable bytes to where `to` says; returns the count.
  absl::StatusOr<size_t> read_into(const Scatter& to, size_t max);
  /// Receiver: once the sender (process `sender_pid`) has published its probe word, tries to
  /// read it and, if that works, allows offers. Inline, as it runs before every read: two
  /// loads once the probe has worked, failed, or has nothing to try yet.
  void probe_single_copy(int32_t sender_pid) {
    if (sender_pid_ == 0 && header_->sender_probe.load(std::memory_order_relaxed) != 0) {
      try_probe(sender_pid);
    }
  }
  /// Receiver: whether the probe has proven that this process may read the sender's memory.
  bool reads_sender_memory() const { return sender_pid_ != 0; }
  /// Whether a written cell is waiting to be read.
  bool readable() const;
  /// Sender: bytes the receiver has read straight from this process.
  uint64_t offered_bytes_taken() const { return offer_taken_; }

  RingHeader& header() { return *header_; }
  const std::string& name() const { return name_; }

 private:
  // An offer covers at most this much of a send, and the receiver copies at most kOfferRead of
  // it per call so that it can forward or reduce what has landed while the rest is read.
  // Offers bound for a Sink go through a scratch buffer of kOfferRead bytes.
  static constexpr size_t kOfferMax = size_t{1} << 29;
  static constexpr size_t kOfferRead = 256 * 1024;

  Ring(std::string name, void* base, size_t mapped_bytes);
  // Sets cells_, bulk_ and the masks: once, from sizes the creator chose or attach checked.
  // Nothing reads the sizes from the shared header after that, where the peer could change them.
  void map_layout(uint64_t cells, uint64_t bulk_capacity);
  uint64_t cell_count() const { return cell_mask_ + 1; }
  uint64_t bulk_capacity() const { return bulk_mask_ + 1; }
  void release();     // unmaps (and removes the name if nobody attached)
  bool cell_free();   // sender: whether the next cell may be written
  // Receiver, finding the next cell empty: pulls in the lines the next small message will
  // fill (the cells after it, the start of the next bulk stretch), so that they cross cores
  // while we poll instead of after the tag has. Else reading a message costs two cross-core
  // misses in a row. 2-rank allgather, alternating runs: 256 B 0.48 -> 0.37 us and 512 B
  // 0.49 -> 0.43 us when this machine's cores are far apart, 0.17 -> 0.15 and 0.163 -> 0.159
  // us when they are near; 8 B allreduce, 64 B-1 MiB allgather and 4 ranks unchanged.
  void prefetch_next_message() const;
  absl::Status check_cell(uint64_t tag) const;  // receiver: the tag is one a sender may write
  void try_probe(int32_t sender_pid);           // receiver: probe_single_copy's slow path
  absl::StatusOr<size_t> collect_offer(const std::byte* data, size_t len);
  // Sender: write()'s copy into cells or the bulk ring, from one buffer or a Gather (one
  // instance each, so that a plain send pays nothing for gathering).
  template <typename Source>
  absl::StatusOr<size_t> write_copy(const Source& from, size_t len);
  // Receiver: the loop under read() and read_into(). `local(src, n, at)` takes n bytes of the
  // ring; `remote(address, n, at)` copies up to n bytes of an offer and returns how many.
  template <typename Local, typename Remote>
  absl::StatusOr<size_t> consume(size_t max, Local local, Remote remote);
  absl::StatusOr<size_t> read_remote(std::byte* dst, uint64_t address, size_t n);
  // Whether a remote read into `dst` from `address` runs at full speed (ring_offer.cc).
  static bool in_step(const std::byte* dst, uint64_t address);
  // Reads up to n bytes of an offer into scratch_, at the same offset modulo 64 as
  // `address`; returns where they landed and how many.
  absl::StatusOr<std::pair<const std::byte*, size_t>> stage_remote(uint64_t address, size_t n);

  struct FreeBytes {
    void operator()(std::byte* p) const { std::free(p); }
  };
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
  // Single copy. Sender: the offer threshold (0: never), bytes offered and reported taken
  // ever, and where the caller's next call must resume. Receiver: offered bytes read ever,
  // the sender's pid once the probe worked, and a buffer that offers destined for a Sink
  // pass through.
  size_t single_copy_from_ = 0;
  BulkPace pace_;  // sender: how fast large copies into the bulk ring ran
  uint64_t offered_ = 0;
  uint64_t offer_taken_ = 0;
  const std::byte* offer_resume_ = nullptr;
  uint64_t offer_read_ = 0;
  int32_t sender_pid_ = 0;
  std::unique_ptr<std::byte, FreeBytes> scratch_;
};

}  // namespace weft::transport::shm
