// A ucx link's small messages, written straight into the peer's memory and found there by
// polling, instead of tagged messages that the peer's worker must progress, match and copy
// out: NCCL's LL protocol, in memory UCX maps.
//
// Each side has UCX allocate a region (ucp_mem_map) and gives the peer its address and
// packed key in the link's hello. Where UCX can map the peer's region into this process (its
// shared-memory transports, processes of one host), ucp_rkey_ptr gives a pointer to it, and
// this side writes there with plain stores: no UCX call on the way. The region is a ring of
// 64-byte cells that only the peer writes, then a line where the peer says how far it has
// read this side's packets and stream. A cell is 56 bytes of data and a tag, stored after
// them with release order (read first, with acquire): the tag holds the cell's sequence
// number, so the reader knows a cell is written when its tag has the number it expects, and
// the writer rewrites every cell on every lap. Data and tag share a line: a cell crosses
// cores as one line, as in weft's shm rings.
//
// A packet is whole cells. Its first cell's tag also holds its length, and its first 8 bytes
// the low 32 bits of the link's stream offset of its first byte. Larger messages stay tagged
// messages, whose tags carry the same offset (address.hpp), so the reader takes packets and
// messages in the stream's order. The offsets are exact as long as the writer is less than
// 2^31 bytes ahead of what the reader has received, which the reader's published position
// keeps it to.
//
// Between hosts there is no pointer, and links keep to tagged messages (an RDMA put of the
// same packets is what would carry them there, not measured yet). A 2-rank 8-byte exchange
// through memory UCX mapped took 0.06 us against 0.20 us by tag
// (tests/benchmarks/ucx_exchange_benchmark).
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weft::transport::ucx {

class Mailbox {
 public:
  /// Cells in the ring (64 KiB). Must hold the largest packet plus kPublishCells, so that a
  /// writer short of room always finds it once the reader has read all there is.
  static constexpr size_t kCells = 1024;
  static constexpr size_t kCellBytes = 56;  ///< data bytes a cell carries
  /// Messages up to this many bytes go as packets. Larger ones, up to 4 or 16 KiB, made a
  /// 2-rank 2 KiB allreduce slower (0.72 to 0.89-0.92 us; four rounds alternating).
  static constexpr size_t kInlineUpTo = 1024;
  /// The reader tells the writer how far it has read after this many cells or bytes.
  static constexpr size_t kPublishCells = kCells / 4;
  static constexpr uint64_t kPublishBytes = uint64_t{1} << 28;
  /// How far the writer may be ahead of the reader's published position, in stream bytes.
  static constexpr uint64_t kWindow = uint64_t{1} << 30;

  struct Packet {
    uint32_t len;     ///< bytes
    uint32_t offset;  ///< low 32 bits of the stream offset of its first byte
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

  /// Cells a packet takes: its offset (8 bytes) and its data.
  static constexpr size_t cells_for(size_t len) { return (8 + len + kCellBytes - 1) / kCellBytes; }
  /// Writer: whether a packet of `len` bytes fits in the peer's ring.
  bool room(size_t len);
  /// Writer: how many more bytes the stream may send, now at `sent` (kWindow less what the
  /// reader has not yet said it received).
  uint64_t window(uint64_t sent);
  /// Writer: writes a packet, which room() said fits.
  void write(uint64_t offset, const std::byte* data, size_t len);

  /// Reader: the next packet's header, once written.
  std::optional<Packet> peek() const;
  /// Reader: copies the packet's bytes to `dst` and consumes it; false (nothing consumed)
  /// while some of its cells have not landed yet.
  bool take(const Packet& p, std::byte* dst);
  /// Reader: tells the writer how far this side has read, packets and stream bytes (`landed`),
  /// when it is time to.
  void publish(uint64_t landed) {
    if (read_ - published_.cells < kPublishCells && landed - published_.bytes < kPublishBytes) {
      return;
    }
    publish_now(landed);
  }

 private:
  // How far a reader has read: it puts this into the writer's region, after the ring there.
  struct Position {
    uint64_t cells;  // ring cells read
    uint64_t bytes;  // stream bytes received
  };
  struct alignas(64) Cell {
    std::byte data[kCellBytes];
    // Written last: the cell's sequence number (its index in the ring's history, plus one,
    // low 32 bits) << 32; in a packet's first cell, or'd with the packet's length.
    uint64_t tag;
  };
  static_assert(sizeof(Cell) == 64);
  static constexpr int kPatience = 4096;  // pauses for a packet's cells once its first landed

  Mailbox() = default;
  static uint64_t sequence(uint64_t at) { return (at + 1) << 32; }
  static constexpr uint64_t kLength = 0xffffffff;
  uint64_t tag(uint64_t at) const {
    return __atomic_load_n(&ring_[at % kCells].tag, __ATOMIC_ACQUIRE);
  }
  static bool landed(uint64_t at, uint64_t tag) { return (tag & ~kLength) == sequence(at); }
  void publish_now(uint64_t landed);
  void load_peer_position();

  ucp_context_h context_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  Cell* ring_ = nullptr;                 // this side's ring, written by the peer
  const Position* peer_position_ = nullptr;  // how far the peer read, written by it
  std::string card_;

  // Writer.
  ucp_rkey_h rkey_ = nullptr;             // keeps the peer's region mapped here
  Cell* peer_ring_ = nullptr;             // the peer's ring, mapped here (null: no packets)
  Position* peer_position_out_ = nullptr;  // where the peer learns how far this side read
  uint64_t written_ = 0;                  // cells ever written
  Position seen_{};                       // the peer's position, as last loaded

  // Reader.
  uint64_t read_ = 0;     // cells ever consumed
  Position published_{};  // as last told the peer
};

}  // namespace weft::transport::ucx
