// Fuzzes PeerInfo::decode, which parses the blob every rank sends the rendezvous (and so
// bytes from the network). Any input must decode or fail cleanly; one that decodes must
// re-encode to exactly the input (decode consumes every byte and every field is kept), and
// that encoding must decode again to the same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/base/peer_info.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto p = weft::PeerInfo::decode(in);
  if (!p.ok()) return 0;
  const std::string encoded = p->encode();
  if (encoded != in) __builtin_trap();
  auto again = weft::PeerInfo::decode(encoded);
  if (!again.ok() || again->encode() != encoded) __builtin_trap();
  if (again->rank != p->rank || again->pid != p->pid || again->host_id != p->host_id ||
      again->addresses != p->addresses || again->gpu_bus_id != p->gpu_bus_id ||
      again->rail_ports != p->rail_ports) {
    __builtin_trap();
  }
  for (const auto& entry : p->addresses) {  // address_of: the first entry of that name
    const auto first = std::find_if(p->addresses.begin(), p->addresses.end(),
                                    [&](const auto& e) { return e.first == entry.first; });
    if (p->address_of(entry.first) != first->second) __builtin_trap();
  }
  return 0;
}
