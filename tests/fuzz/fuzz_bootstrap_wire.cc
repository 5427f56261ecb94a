// Fuzzes the rendezvous wire (src/bootstrap_wire.hpp): the server parses hello headers from
// anyone who connects, and ranks parse the server's reply header. On any input:
// hello_length is OK only for a weft hello and then lies in [kHelloHeaderBytes,
// kHelloHeaderBytes + kMaxPeerBlobBytes] and matches the parsed blob length; a hello whose
// blob is present re-encodes (encode_hello) to the same bytes; an error reply built from
// the input parses back to its code; hex_prefix writes two digits per byte it covers.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "src/bootstrap_wire.hpp"

namespace wire = weft::bootstrap_wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  const wire::Hello h = wire::parse_hello_header(in);
  auto len = wire::hello_length(in);
  if (size < wire::kHelloHeaderBytes && (h.magic_ok || len.ok())) __builtin_trap();
  if (len.ok()) {
    if (!h.magic_ok || *len < wire::kHelloHeaderBytes ||
        *len > wire::kHelloHeaderBytes + weft::kMaxPeerBlobBytes ||
        *len != wire::kHelloHeaderBytes + h.blob_len) {
      __builtin_trap();
    }
    // Bytes 6-7 are padding, always 0 from encode_hello; compare only such hellos.
    if (*len <= size && h.version == wire::kProtocolVersion && in[6] == 0 && in[7] == 0) {
      const std::string blob(in.substr(wire::kHelloHeaderBytes, h.blob_len));
      const std::string again = wire::encode_hello(h.job_id, static_cast<int>(h.rank),
                                                   static_cast<int>(h.size), h.nonce, blob);
      if (again != in.substr(0, *len)) __builtin_trap();
    }
  }

  const wire::ReplyHeader r = wire::parse_reply_header(in);
  if (size < wire::kReplyHeaderBytes && r.magic_ok) __builtin_trap();
  if (size >= wire::kReplyHeaderBytes) {
    if (r.magic_ok != (std::memcmp(in.data(), wire::kMagic, 4) == 0)) __builtin_trap();
    const std::string reply = wire::encode_error_reply(static_cast<absl::StatusCode>(r.code),
                                                       in.substr(wire::kReplyHeaderBytes));
    const wire::ReplyHeader back = wire::parse_reply_header(reply);
    if (!back.magic_ok || back.code != r.code ||
        reply.size() > wire::kReplyHeaderBytes + 4 + wire::kMaxMessageBytes) {
      __builtin_trap();
    }
  }

  const size_t n = size == 0 ? 0 : data[0];
  if (wire::hex_prefix(in, n).size() != 2 * std::min(n, size)) __builtin_trap();
  if (wire::hex_prefix(in, SIZE_MAX).size() != 2 * size) __builtin_trap();
  return 0;
}
