// Fuzzes shrink's decoders (src/shrink_wire.hpp): the leader reads every survivor's report,
// every survivor reads the leader's decision and the address table's blob headers. Input:
// 2 bytes picking the communicator size (1..4096), then the bytes of one message, read as a
// report, a decision and a blob header. Any input must decode or fail cleanly; what decodes
// must re-encode to exactly its bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/shrink_wire.hpp"

namespace sw = weft::shrink_wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int n = (data[0] | data[1] << 8) % 4096 + 1;
  // A copy of exactly the message's length, so a read past its end is caught.
  const std::string in(reinterpret_cast<const char*>(data) + 2, size - 2);

  if (auto r = sw::decode_report(in, n); r.ok()) {
    if (r->from_rank < 0 || r->from_rank >= n || static_cast<int>(r->reached.size()) != n) {
      __builtin_trap();
    }
    if (sw::encode_report(*r) != in) __builtin_trap();
  }
  if (auto d = sw::decode_decision(in, n); d.ok()) {
    if (static_cast<int>(d->survivors.size()) != n) __builtin_trap();
    if (sw::encode_decision(*d) != in) __builtin_trap();
  }
  if (in.size() >= sw::kBlobHeaderBytes) {
    const std::string_view header(in.data(), sw::kBlobHeaderBytes);
    if (auto len = sw::decode_blob_length(header); len.ok()) {
      if (sw::encode_blob(std::string(*len, 'x')).substr(0, sw::kBlobHeaderBytes) != header) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
