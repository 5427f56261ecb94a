// Fuzzes decode_unique_id: the 128-byte UniqueId travels from rank 0 to every rank through
// the user's own channel, so it may arrive damaged. Input: up to 128 bytes, zero padded.
// An id that decodes must re-encode (encode_unique_id) to the same bytes in every field the
// layout defines (offsets 0-25 and 32-55); the reserved bytes (26-31, 56-127) are not
// checked by decode, so they are only required to be zero in the re-encoded id. The
// re-encoded id must decode to the same values.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/unique_id.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::UniqueId id;
  std::memcpy(id.bytes.data(), data, std::min(size, id.bytes.size()));
  auto d = weft::decode_unique_id(id);
  if (!d.ok()) return 0;
  const weft::UniqueId again = weft::encode_unique_id(d->address, d->job_id, d->secret);
  const uint8_t* a = id.bytes.data();
  const uint8_t* b = again.bytes.data();
  if (std::memcmp(a, b, 26) != 0 || std::memcmp(a + 32, b + 32, 24) != 0) __builtin_trap();
  for (size_t i = 0; i < again.bytes.size(); ++i) {
    if ((i >= 26 && i < 32) || i >= 56) {
      if (b[i] != 0) __builtin_trap();
    }
  }
  auto d2 = weft::decode_unique_id(again);
  if (!d2.ok() || !(d2->address == d->address) || d2->job_id != d->job_id ||
      d2->secret != d->secret) {
    __builtin_trap();
  }
  (void)d->address.to_string();  // formats any address without overrunning its buffer
  return 0;
}
