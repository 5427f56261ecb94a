// A ucx link's small and middling messages, written straight into the peer's memory and
// found there by polling, instead of tagged messages that the peer's worker must progress,
// match and copy out: the cells and bulk ring of weft's shm rings, in memory UCX maps.
//
// Each side has UCX allocate a region (ucp_mem_map) and gives the peer its address and
// packed key in the link's hello. Where UCX can map the peer's region into this process (its
// shared-memory transports, processes of one host), ucp_rkey_ptr gives a pointer to it, and
// this side writes there with plain stores: no UCX call on the way. The region holds a ring
// of 64-byte cells and a bulk ring of bytes, both written only by the peer, and a line where
// the peer says how far it has read this side's cells, bulk and stream. A cell is 56 bytes
// of data and a tag, stored after them with release order (read first, with acquire): the
// tag holds the low bits of the cell's sequence number, so the reader knows a cell is
// written when its tag has the number it expects, and the writer rewrites every cell on
// every lap. Data and tag share a line: a cell crosses cores as one line.
//
// A packet up to kInlineUpTo is whole cells of data: the first cell's tag also holds its
// length and the low 32 bits of the link's stream offset of its first byte, so that a call
// check's state and 32 bytes of data fit one cell, as in shm's rings. A larger one, up to
// kPacketsUpTo, is one cell (its tag says bulk and holds the offset, its data the length
// and where in the bulk ring its bytes lie) written after its bytes, which lie in one
// stretch of the bulk ring: one copy in, one flag, one copy out. Larger messages stay
// tagged messages, whose tags carry the same offset (address.hpp), so the reader takes
// packets and messages in the stream's order. The offsets are exact as long as the writer is
// less than 2^31 bytes ahead of what the reader has received, which the reader's published
// position keeps it to.
//
// Between hosts there is no pointer, and links keep to tagged messages (an RDMA put of the
// same packets is what would carry them there, not measured yet). One 2-process exchange
// (tests/benchmarks/ucx_exchange_benchmark) took 0.06 us through memory UCX mapped against
// 0.20 us by tag at 8 bytes, and 0.28 against 0.48 us at 1 KiB, 0.56 against 0.76 at 2 KiB.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "transport/bulk_pace.hpp"
#include "transport/transport.hpp"

namespace weft::transport::ucx {

class Mailbox {
 public:
  /// Cells in the ring (64 KiB). Must hold the largest packet plus kPublishCells, so that a
  /// writer short of room always finds it once the reader has read all there is.
  static constexpr size_t kCells = 1024;
  static constexpr size_t kCellBytes = 56;  ///< data bytes a cell carries
  /// Messages up to this many bytes go as packets of cells (eight at most), larger ones
  /// through the bulk ring: a 280-byte message was faster in cells, a 536-byte one in bulk
  /// (2-rank 256 and 512-byte allreduces, 5 rounds alternating), and cells up to 4 KiB made
  /// a 2 KiB allreduce slower even than tagged messages (0.72 to 0.89-0.92 us).
  static constexpr size_t kInlineUpTo = 440;
  /// Bytes of the bulk ring, and the largest message that goes through it: 256 KiB and a
  /// call check's state, as far as UCX would send eagerly (UcxPair::kEagerUpTo). Larger ones
  /// go tagged, by rendezvous. Against a 256 KiB ring taking up to 32 KiB, a 2-rank 512 KiB
  /// allreduce took 31 us instead of 70 and a 32 KiB one 3.0 instead of 5.5 (4 rounds
  /// alternating); even messages both rings take went faster through the larger one (8 KiB
  /// allgather 2.07 against 2.69 us), unexplained.
  /// While large packets are written slowly (pace()), offers from BulkPace::kTimedFrom go by
  /// rendezvous instead.
  static constexpr size_t kBulkBytes = size_t{2} << 20;
  static constexpr size_t kPacketsUpTo = (size_t{256} << 10) + 64;
  /// The reader tells the writer how far it has read after this many cells or bytes.
  static constexpr size_t kPublishCells = kCells / 4;
  static constexpr size_t kPublishBulk = kBulkBytes / 4;
  static constexpr uint64_t kPublishBytes = uint64_t{1} << 28;
  /// How far the writer may be ahead of the reader's published position, in stream bytes.
  static constexpr uint64_t kWindow = uint64_t{1} << 30;

  struct Packet {
    uint32_t len;      ///< bytes
    uint32_t offset;   ///< low 32 bits of the stream offset of its first byte
    uint64_t bulk_at;  ///< a bulk packet's: where its bytes lie, in bulk bytes ever used
  };

  /// Maps this side's region in `context`, its pages touched.
  static absl::StatusOr<std::unique_ptr<Mailbox>> create(ucp_context_h context);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  /// What the peer needs to write into this side's region: its address and packed key.
  const std::string& card() const { return card_; }
  /// Reads the peer's card. Returns whether UCX maps the peer's region here, the only case
  /// where this side writes packets, and publishes how far it has read (which a peer writing
  /// packets needs: where one side maps, so does the other, one host and one UCX).
  absl::StatusOr<bool> reach(ucp_ep_h ep, std::string_view card);

  /// Cells a packet takes: its data, or for a bulk one its descriptor.
  static constexpr size_t cells_for(size_t len) {
    return len > kInlineUpTo ? 1 : (len + kCellBytes - 1) / kCellBytes;
  }
  /// Writer: whether a packet of `len` bytes (at most kPacketsUpTo) fits in the peer's rings.
  bool room(size_t len);
  /// Writer: how many more bytes the stream may send, now at `sent` (kWindow less what the
  /// reader has not yet said it received).
  uint64_t window(uint64_t sent);
  /// Writer: writes a packet of the first `len` bytes of `from`, which room() said fits.
  void write(uint64_t offset, const Gather& from, size_t len);
  /// Writer: how fast its large packets were written (bulk_pace.hpp): whether a packet is
  /// worth writing now, or a message of its size had better go by rendezvous.
  const BulkPace& pace() const { return pace_; }

  /// Reader: the next packet's header, once written.
  std::optional<Packet> peek() const;
  /// Reader: whether a packet's length, and a bulk one's place, are ones a writer writes.
  bool valid(const Packet& p) const;
  /// Room for a packet of cells gathered in one piece.
  static constexpr size_t kGatherBytes =
      (kInlineUpTo + kCellBytes - 1) / kCellBytes * kCellBytes;
  /// Reader: consumes the packet, whose bytes valid() said are in place, and returns them in
  /// one piece: where they lie (one cell, the bulk ring) or gathered into `scratch`. They stay
  /// there until this side next publishes. Null (nothing consumed) while some of its cells
  /// have not landed yet.
  const std::byte* take(const Packet& p, std::byte (&scratch)[kGatherBytes]);
  /// Reader: the next packet, consumed, if it starts at stream offset `offset` (low 32 bits),
  /// has landed whole, is valid and has at most `max` bytes: a small call's state and data,
  /// with one look at the tag. Its bytes as take() returns them, `*len` of them. Null
  /// otherwise, nothing consumed: peek() and take() tell the rest.
  const std::byte* take_whole(uint32_t offset, size_t max, std::byte (&scratch)[kGatherBytes],
                              size_t* len) {
    const uint64_t t = tag(read_);
    if (!landed(read_, t) || static_cast<uint32_t>(t) != offset) return nullptr;
    const size_t n = (t >> 32) & 0xffff;
    if (n == kBulk) {  // its length first: a caller that wants only a head looks no further
      uint64_t length = 0;
      std::memcpy(&length, ring_[read_ % kCells].data, sizeof length);
      return length <= max ? take_bulk_whole(len) : nullptr;
    }
    if (n == 0 || n > kInlineUpTo || n > max) return nullptr;
    *len = n;
    return n <= kCellBytes ? ring_[read_++ % kCells].data : gather(cells_for(n), scratch);
  }
  /// Reader: whether a packet's bytes lie in the bulk ring. The writer leaves them there
  /// until the packet is consumed, so they may be read in parts: bulk_bytes(p, from) is its
  /// byte `from` on, and consume_bulk(p) consumes it.
  static bool in_bulk(const Packet& p) { return p.len > kInlineUpTo; }
  const std::byte* bulk_bytes(const Packet& p, size_t from) const {
    return bulk_ + p.bulk_at % kBulkBytes + from;
  }
  void consume_bulk(const Packet& p) {
    bulk_read_ = p.bulk_at + stretch(p.len);
    read_ += 1;
  }
  /// Reader: tells the writer how far this side has read, packets and stream bytes (`landed`),
  /// when it is time to.
  void publish(uint64_t landed) {
    if (read_ - published_.cells < kPublishCells && bulk_read_ - published_.bulk < kPublishBulk &&
        landed - published_.bytes < kPublishBytes) {
      return;
    }
    publish_now(landed);
  }

 private:
  // How far a reader has read: it puts this into the writer's region, after the cells there.
  struct Position {
    uint64_t cells;  // ring cells read
    uint64_t bulk;   // bulk bytes consumed (stretches and the skips before them)
    uint64_t bytes;  // stream bytes received
  };
  struct alignas(64) Cell {
    std::byte data[kCellBytes];
    // Written last. Bits 48-63: the cell's sequence number (its index in the ring's history,
    // plus one), low 16 bits: a cell a lap or more behind has another. In a packet's first
    // cell, bits 32-47: its length, or kBulk; bits 0-31: its stream offset's low 32 bits.
    uint64_t tag;
  };
  static_assert(sizeof(Cell) == 64);
  static constexpr int kPatience = 4096;  // pauses for a packet's cells once its first landed

  Mailbox() = default;
  static uint64_t sequence(uint64_t at) { return ((at + 1) & 0xffff) << 48; }
  static constexpr uint64_t kSequence = uint64_t{0xffff} << 48;
  static constexpr uint32_t kBulk = 0xffff;  // a first cell's length field: a bulk packet
  static uint64_t first_tag(uint64_t at, uint32_t len, uint64_t offset) {
    return sequence(at) | uint64_t{len} << 32 | static_cast<uint32_t>(offset);
  }
  uint64_t tag(uint64_t at) const {
    return __atomic_load_n(&ring_[at % kCells].tag, __ATOMIC_ACQUIRE);
  }
  static bool landed(uint64_t at, uint64_t tag) { return (tag & kSequence) == sequence(at); }
  // Where a bulk stretch of `len` bytes goes when the writer has used `used` bytes so far:
  // the next 64-byte boundary, or the ring's start when the stretch would pass its end.
  static uint64_t bulk_place(uint64_t used, size_t len);
  static constexpr size_t stretch(size_t len) { return (len + 63) / 64 * 64; }
  void write_bulk(uint64_t offset, const Gather& from, size_t len);
  // Consumes the next `cells` cells, whose first landed, into `scratch`; null (nothing
  // consumed) while the others have not landed yet.
  const std::byte* gather(size_t cells, std::byte (&scratch)[kGatherBytes]);
  // take_whole's bulk packet, whose cell landed.
  const std::byte* take_bulk_whole(size_t* len);
  void publish_now(uint64_t landed);
  void load_peer_position();

  ucp_context_h context_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  Cell* ring_ = nullptr;                 // this side's rings, written by the peer
  const std::byte* bulk_ = nullptr;
  const Position* peer_position_ = nullptr;  // how far the peer read, written by it
  std::string card_;

  // Writer.
  ucp_rkey_h rkey_ = nullptr;             // keeps the peer's region mapped here
  Cell* peer_ring_ = nullptr;             // the peer's rings, mapped here (null: no packets)
  std::byte* peer_bulk_ = nullptr;
  Position* peer_position_out_ = nullptr;  // where the peer learns how far this side read
  uint64_t written_ = 0;                  // cells ever written
  uint64_t bulk_written_ = 0;             // bulk bytes ever used
  Position seen_{};                       // the peer's position, as last loaded
  BulkPace pace_;

  // Reader.
  uint64_t read_ = 0;       // cells ever consumed
  uint64_t bulk_read_ = 0;  // bulk bytes ever consumed
  Position published_{};    // as last told the peer
};

}  // namespace weft::transport::ucx
