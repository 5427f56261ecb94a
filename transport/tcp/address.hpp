// What the tcp transport publishes in bootstrap: one "ip:port" (IPv6 as "[addr]:port") per
// rail it listens on, comma-separated ("10.0.0.1:4000,10.1.0.1:4001"). A rank with one rail
// publishes exactly one ip:port, the form every weft before rails published.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weft::transport::tcp {

/// Most rails (interfaces) one rank listens on, and so most sockets one link opens; also the
/// most addresses a published list may hold. NCCL caps its socket interfaces at 16 too.
inline constexpr size_t kMaxRails = 16;

/// An IPv4 or IPv6 socket address, ready for bind(2) and connect(2).
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  /// The port in host byte order.
  uint16_t port() const;
  /// The numeric IP, without brackets or port.
  std::string ip() const;
  /// A copy of an IPv4 or IPv6 sockaddr (as getifaddrs or accept gives them).
  static SockAddr from(const sockaddr* sa);
};

/// Builds the socket address of a numeric IP ("10.0.0.1" or "fe80::1") and a port.
absl::StatusOr<SockAddr> make_sockaddr(const std::string& ip, uint16_t port);

/// Parses one published address: "1.2.3.4:5678" or "[::1]:5678". Names are not resolved:
/// every rank publishes the numeric IP it listens on.
absl::StatusOr<SockAddr> parse_address(std::string_view text);

/// Parses a published list: 1 to kMaxRails addresses separated by commas, each as
/// parse_address takes it. Any bad entry (an empty one included) fails the whole list.
absl::StatusOr<std::vector<SockAddr>> parse_address_list(std::string_view text);

/// The published form of `addr`: "ip:port", or "[ip]:port" for IPv6.
std::string format_address(const SockAddr& addr);
/// The published form of a list: format_address of each, joined by commas.
std::string format_address_list(const std::vector<SockAddr>& addrs);


}  // namespace weft::transport::tcp
