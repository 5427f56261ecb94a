#include "transport/tcp/handshake.hpp"

#include <cstring>
#include <string_view>

namespace weft::transport::tcp {
namespace {

void put(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void put_header(uint8_t* w, const Handshake& h) {
  put(&w[0], h.magic, 4);
  put(&w[4], h.version, 4);
  put(&w[8], h.job_id, 8);
  put(&w[16], h.from_rank, 4);
  put(&w[20], h.to_rank, 4);
  put(&w[24], h.size, 4);
  put(&w[28], h.verdict, 4);
  put(&w[32], h.rail, 4);
  put(&w[36], h.rail_count, 4);
  std::memcpy(&w[kHeaderBytes], h.nonce.data(), h.nonce.size());
}

Handshake get_header(const uint8_t* w) {
  Handshake h;
  h.magic = static_cast<uint32_t>(get(&w[0], 4));
  h.version = static_cast<uint32_t>(get(&w[4], 4));
  h.job_id = get(&w[8], 8);
  h.from_rank = static_cast<uint32_t>(get(&w[16], 4));
  h.to_rank = static_cast<uint32_t>(get(&w[20], 4));
  h.size = static_cast<uint32_t>(get(&w[24], 4));
  h.verdict = static_cast<uint32_t>(get(&w[28], 4));
  h.rail = static_cast<uint32_t>(get(&w[32], 4));
  h.rail_count = static_cast<uint32_t>(get(&w[36], 4));
  std::memcpy(h.nonce.data(), &w[kHeaderBytes], h.nonce.size());
  return h;
}

constexpr size_t kAckProofAt = kHeaderBytes + sizeof(Nonce);

std::string_view text(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

}  // namespace

HelloWire encode_hello(const Handshake& h) {
  HelloWire w{};
  put_header(w.data(), h);
  return w;
}

AckWire encode_ack(const Handshake& h) {
  AckWire w{};
  put_header(w.data(), h);
  std::memcpy(&w[kAckProofAt], h.proof.data(), h.proof.size());
  return w;
}

Handshake decode_hello(const uint8_t* wire) { return get_header(wire); }

Handshake decode_ack(const uint8_t* wire) {
  Handshake h = get_header(wire);
  std::memcpy(h.proof.data(), &wire[kAckProofAt], h.proof.size());
  return h;
}

bool other_version(const uint8_t* wire, size_t got) {
  return got >= 8 && get(&wire[0], 4) == kHandshakeMagic && get(&wire[4], 4) != kHandshakeVersion;
}

Proof listener_proof(const JobSecret& secret, const HelloWire& hello, const AckWire& ack) {
  return prove(secret, "weft tcp listener",
               {text(hello.data(), hello.size()), text(ack.data(), kAckProofAt)});
}

Proof dialer_proof(const JobSecret& secret, const HelloWire& hello, const AckWire& ack) {
  return prove(secret, "weft tcp dialer",
               {text(hello.data(), hello.size()), text(ack.data(), ack.size())});
}

}  // namespace weft::transport::tcp
