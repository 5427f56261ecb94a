// Fuzzes decode_unique_id: the 128-byte UniqueId travels from rank 0 to every rank through
// the user's own channel, so it may arrive damaged. Input: up to 128 bytes, zero padded.
// An id that decodes must re-encode (encode_unique_id) to exactly the same bytes (decode
// refuses nonzero reserved bytes), and the re-encoded id must decode to the same values.
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
  if (again.bytes != id.bytes) __builtin_trap();
  auto d2 = weft::decode_unique_id(again);
  if (!d2.ok() || !(d2->address == d->address) || d2->job_id != d->job_id ||
      d2->secret != d->secret) {
    __builtin_trap();
  }
  (void)d->address.to_string();  // formats any address without overrunning its buffer
  return 0;
}
