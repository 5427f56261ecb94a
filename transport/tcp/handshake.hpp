// The tcp connection handshake: who is calling whom, and proof that both know the job secret.
//
//   dialer -> listener   hello  (56 bytes): header, the dialer's nonce
//   listener -> dialer   ack    (88 bytes): header with the verdict, the listener's nonce,
//                                           the listener's proof
//   dialer -> listener   proof  (32 bytes): the dialer's proof
//
// A header is 40 bytes, little-endian: magic "WEFT", version, job id, from rank, to rank,
// communicator size, verdict (hello, accepted, rejected), rail, rail count. Every socket of
// a link shakes hands on its own; rail (0 .. rail count - 1) says which of the link's
// sockets this is and rail count how many the dialer opens, so the listener can group them
// (the ack repeats both). Magic and version keep their offsets in every version, so each
// side can tell an older or newer peer as soon as 8 bytes are in. Proofs are HMAC-SHA256 with the
// job secret over everything said before them, the other side's fresh nonce included
// (src/base/job_secret.hpp), so the secret never travels and a recorded handshake cannot be
// replayed. The ack names the listener, so a dialer that reached the wrong job or rank can
// say so at once; the listener takes the connection only once the dialer's proof checks out.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "src/base/job_secret.hpp"

namespace weft::transport::tcp {

inline constexpr uint32_t kHandshakeMagic = 0x54464557;  // "WEFT" on the wire
// 3: rails; 4: framed, a socket per direction; 5: data and control sockets; 6: 40-byte frame
// headers with a riding acknowledgement
inline constexpr uint32_t kHandshakeVersion = 6;
inline constexpr size_t kHeaderBytes = 40;
inline constexpr size_t kHelloBytes = kHeaderBytes + sizeof(Nonce);
inline constexpr size_t kAckBytes = kHeaderBytes + sizeof(Nonce) + sizeof(Proof);
inline constexpr size_t kProofBytes = sizeof(Proof);
inline constexpr size_t kLongestMessage = kAckBytes;

/// kQuery and kAlive are a liveness query and its answer (liveness.hpp): a hello and an ack
/// like the others, after which the listener closes the connection. kRelay and kAddPath
/// build a path through a third rank (relay.hpp): a kRelay hello asks the listener to connect
/// the socket through to rank `rail`, and a kAddPath hello, sent through it, offers the socket
/// to the live link between the two ends as socket `rail` (0 data, 1 control) of a new path.
enum Verdict : uint32_t {
  kHello = 0, kAccepted = 1, kRejected = 2, kQuery = 3, kAlive = 4, kRelay = 5, kAddPath = 6
};

struct Handshake {
  uint32_t magic = kHandshakeMagic;
  uint32_t version = kHandshakeVersion;
  uint64_t job_id = 0;
  uint32_t from_rank = 0;
  uint32_t to_rank = 0;
  uint32_t size = 0;
  uint32_t verdict = kHello;
  uint32_t rail = 0;        ///< which socket of the link, below rail_count
  uint32_t rail_count = 1;  ///< how many sockets the dialer opens for the link
  Nonce nonce{};
  Proof proof{};  ///< ack only
};

using HelloWire = std::array<uint8_t, kHelloBytes>;
using AckWire = std::array<uint8_t, kAckBytes>;

HelloWire encode_hello(const Handshake& h);
AckWire encode_ack(const Handshake& h);
/// Decodes a whole hello or ack; any bytes decode, the caller checks the fields.
Handshake decode_hello(const uint8_t* wire);
Handshake decode_ack(const uint8_t* wire);

/// True when the first `got` bytes of a hello or ack hold weft's magic and a version other
/// than kHandshakeVersion. Messages of other versions differ in length, so a side that
/// waited for a whole message would wait for bytes that never come.
bool other_version(const uint8_t* wire, size_t got);

/// The listener's proof, over the hello and the ack up to the proof.
Proof listener_proof(const JobSecret& secret, const HelloWire& hello, const AckWire& ack);
/// The dialer's proof, over the hello and the whole ack.
Proof dialer_proof(const JobSecret& secret, const HelloWire& hello, const AckWire& ack);

}  // namespace weft::transport::tcp
