// The tcp connection handshake: who is calling whom, and proof that both know the job secret.
//
//   dialer -> listener   hello  (48 bytes): header, the dialer's nonce
//   listener -> dialer   ack    (80 bytes): header with the verdict, the listener's nonce,
//                                           the listener's proof
//   dialer -> listener   proof  (32 bytes): the dialer's proof
//
// A header is 32 bytes, little-endian: magic "WEFT", version, job id, from rank, to rank,
// communicator size, verdict (hello, accepted, rejected). Proofs are HMAC-SHA256 with the
// job secret over everything said before them, the other side's fresh nonce included
// (src/job_secret.hpp), so the secret never travels and a recorded handshake cannot be
// replayed. The ack names the listener, so a dialer that reached the wrong job or rank can
// say so at once; the listener takes the connection only once the dialer's proof checks out.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "src/job_secret.hpp"

namespace weft::transport::tcp {

inline constexpr uint32_t kHandshakeMagic = 0x54464557;  // "WEFT" on the wire
inline constexpr uint32_t kHandshakeVersion = 2;
inline constexpr size_t kHeaderBytes = 32;
inline constexpr size_t kHelloBytes = kHeaderBytes + sizeof(Nonce);
inline constexpr size_t kAckBytes = kHeaderBytes + sizeof(Nonce) + sizeof(Proof);
inline constexpr size_t kProofBytes = sizeof(Proof);
inline constexpr size_t kLongestMessage = kAckBytes;

enum Verdict : uint32_t { kHello = 0, kAccepted = 1, kRejected = 2 };

struct Handshake {
  uint32_t magic = kHandshakeMagic;
  uint32_t version = kHandshakeVersion;
  uint64_t job_id = 0;
  uint32_t from_rank = 0;
  uint32_t to_rank = 0;
  uint32_t size = 0;
  uint32_t verdict = kHello;
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

/// The listener's proof, over the hello and the ack up to the proof.
Proof listener_proof(const JobSecret& secret, const HelloWire& hello, const AckWire& ack);
/// The dialer's proof, over the hello and the whole ack.
Proof dialer_proof(const JobSecret& secret, const HelloWire& hello, const AckWire& ack);

}  // namespace weft::transport::tcp
