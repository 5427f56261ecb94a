// Frames: what a tcp link writes on its sockets, so that a stream outlives the socket it
// runs on. Every run of data bytes travels with a descriptor saying where in the link's
// stream it belongs (offset), under which epoch (the sender starts a new epoch each time it
// resends after a fault) and on which socket the next frame follows; the receiver answers
// with acknowledgements (what it has consumed) and requests to resend (a checksum that did
// not match, a rail it lost). Control frames travel on a socket of their own beside each
// rail's data socket, so a control frame never waits behind data nobody is reading
// (pair.hpp). Acknowledgements also ride on the data frames going the other way
// (RidingAcks), so a link with data both ways seldom sends a control frame at all.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "src/base/env.hpp"

namespace weft::transport::tcp {

inline constexpr size_t kFrameHeaderBytes = 40;
static_assert(kFrameHeaderBytes == env::kFaultFrameHeaderBytes, "WEFT_INJECT_PATH_KILL's +hN");

struct Frame {
  enum Type : uint8_t { kData = 1, kAck = 2, kResend = 3 };
  Type type = kData;
  /// Data: the payload carries a CRC32C in payload_crc, which the receiver checks before it
  /// hands a byte over.
  bool checksummed = false;
  /// Data: some of the payload lies where the sender's caller keeps it until its call ends,
  /// and the sender would rather wait for its acknowledgement then than copy it
  /// (Inbound::call_received).
  bool lent = false;
  uint8_t next_path = 0;  ///< data: the path the epoch's next frame goes on
  uint32_t epoch = 0;     ///< data and resend: the sender's epoch
  /// data: the stream offset of the first payload byte; ack: bytes consumed; resend: where
  /// to resume
  uint64_t offset = 0;
  /// data: payload bytes; resend: the paths (bit per path) the receiver has lost
  uint32_t length = 0;
  uint32_t payload_crc = 0;
  /// data: what the sender has consumed of the stream coming the other way (an
  /// acknowledgement riding along; 0 when nothing yet)
  uint64_t ack = 0;
};

/// What the two halves of a link share so acknowledgements ride on data frames: the sending
/// half's headers carry what the receiving half consumed, and the receiving half passes on
/// what the peer's headers carried. Every value only grows, and any header that passed its
/// own CRC tells the truth, even a stale one: consumption never goes back.
struct RidingAcks {
  uint64_t consumed = 0;       ///< the receiving half has handed over every byte before
  uint64_t carried = 0;        ///< the most that a header this end wrote whole carried
  uint64_t peer_consumed = 0;  ///< the most that the peer's headers carried
};

/// Writes `f` as kFrameHeaderBytes, sealed by a CRC32C of the header itself.
void encode_frame(const Frame& f, std::byte* out);
/// Reads a header; an error when it is not one (a stream out of step, or corrupted).
absl::StatusOr<Frame> decode_frame(const std::byte* in);

/// CRC32C (Castagnoli, as iSCSI, ext4 and NVMe-oF use it) of `len` bytes, continuing `crc`:
/// the SSE4.2 instruction where the CPU has it (8 bytes a cycle), else a table.
uint32_t crc32c(const std::byte* data, size_t len, uint32_t crc = 0);

}  // namespace weft::transport::tcp
