// Fuzzes parse_address_list (transport/tcp/address.hpp), which parses the tcp address every
// peer publishes in bootstrap ("ip:port" per rail, comma-separated), and so bytes from the
// network. Any input must parse or fail cleanly; a list that parses holds 1 to kMaxRails
// addresses, and its published form parses again to the same addresses and prints the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "transport/tcp/address.hpp"

namespace tcp = weft::transport::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto list = tcp::parse_address_list(in);
  if (!list.ok()) return 0;
  if (list->empty() || list->size() > tcp::kMaxRails) __builtin_trap();
  const std::string published = tcp::format_address_list(*list);
  auto again = tcp::parse_address_list(published);
  if (!again.ok() || again->size() != list->size()) __builtin_trap();
  for (size_t i = 0; i < list->size(); ++i) {
    const tcp::SockAddr& a = (*list)[i];
    const tcp::SockAddr& b = (*again)[i];
    if (a.family() != b.family() || a.port() != b.port() || a.ip() != b.ip()) __builtin_trap();
  }
  if (tcp::format_address_list(*again) != published) __builtin_trap();
  return 0;
}
