// What the tcp transport publishes in bootstrap ("ip:port", IPv6 as "[addr]:port"), and
// how a rank picks the local IP it listens on. The bootstrap reuses choose_listen_ip and
// interface_holding so that the rendezvous and the data links agree on one interface.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weft::transport::tcp {

/// An IPv4 or IPv6 socket address, ready for bind(2) and connect(2).
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  /// The port in host byte order.
  uint16_t port() const;
};

/// Builds the socket address of a numeric IP ("10.0.0.1" or "fe80::1") and a port.
absl::StatusOr<SockAddr> make_sockaddr(const std::string& ip, uint16_t port);

/// Parses a published address: "1.2.3.4:5678" or "[::1]:5678". Names are not resolved:
/// every rank publishes the numeric IP it listens on.
absl::StatusOr<SockAddr> parse_address(std::string_view text);

/// True when a connection to `address` (published form) is refused within `wait_ms`: no
/// listener is there any more. The connection, if one is made, closes without a byte, which
/// a weft listener takes quietly.
bool refuses_connections(std::string_view address, int wait_ms);

/// The published form of `addr`: "ip:port", or "[ip]:port" for IPv6.
std::string format_address(const SockAddr& addr);

/// Chooses the local IP to listen on. A non-empty `ifname` (WEFT_SOCKET_IFNAME) must name
/// an interface that is up and has an address (IPv4 preferred); otherwise the first
/// non-loopback IPv4 interface that is up and running (docker bridges skipped, as NCCL
/// does: they do not reach other hosts), else 127.0.0.1 for single-host jobs.
absl::StatusOr<std::string> choose_listen_ip(const std::string& ifname);

/// The name of the local interface that holds `addr`'s IP (the port does not matter), or an
/// empty string when no interface of this host has that address.
absl::StatusOr<std::string> interface_holding(const SockAddr& addr);

}  // namespace weft::transport::tcp
