// Fuzzes the tcp handshake decoders (transport/tcp/handshake.hpp): a listener decodes the
// hello of whoever dials it, a dialer the ack of whoever answers. Any kHelloBytes /
// kAckBytes decode (the caller checks the fields), so the check is the round trip: encoding
// what was decoded gives back exactly the bytes. Each message is copied into a buffer of
// exactly its size so that a read past its end is caught; shorter inputs are skipped.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "transport/tcp/handshake.hpp"

namespace tcp = weft::transport::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= tcp::kHelloBytes) {
    auto wire = std::make_unique<uint8_t[]>(tcp::kHelloBytes);
    std::memcpy(wire.get(), data, tcp::kHelloBytes);
    const tcp::HelloWire again = tcp::encode_hello(tcp::decode_hello(wire.get()));
    if (std::memcmp(again.data(), wire.get(), tcp::kHelloBytes) != 0) __builtin_trap();
  }
  if (size >= tcp::kAckBytes) {
    auto wire = std::make_unique<uint8_t[]>(tcp::kAckBytes);
    std::memcpy(wire.get(), data, tcp::kAckBytes);
    const tcp::AckWire again = tcp::encode_ack(tcp::decode_ack(wire.get()));
    if (std::memcmp(again.data(), wire.get(), tcp::kAckBytes) != 0) __builtin_trap();
  }
  return 0;
}
