// What weft::UniqueId's 128 bytes hold: where the rendezvous listens and which job it serves.
//
// Layout (integers little-endian, addresses in network byte order):
//   0  u32  magic "WEFT"            4  u16  version (kUniqueIdVersion)
//   6  u16  family (4 or 6)         8  u16  port
//  10  u8[16] address (IPv4 uses the first 4 bytes)
//  26  u8[6]  zero
//  32  u64  job id                 40  u8[16] job secret (src/base/job_secret.hpp)
//  56  ...  zero up to 128
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/base/env.hpp"
#include "weft/weft.hpp"

namespace weft {

inline constexpr uint16_t kUniqueIdVersion = 1;

/// An IPv4 or IPv6 endpoint, independent of the platform's sockaddr layout.
struct RendezvousAddress {
  int family = 4;                      ///< 4 or 6
  std::array<uint8_t, 16> address{};   ///< network byte order; IPv4 in the first 4 bytes
  uint16_t port = 0;                   ///< host byte order

  /// "1.2.3.4:5" or "[::1]:5", for messages.
  std::string to_string() const;
  /// Fills `out` for bind/connect and returns its length.
  socklen_t to_sockaddr(sockaddr_storage& out) const;
  /// InvalidArgument for anything but AF_INET / AF_INET6.
  static absl::StatusOr<RendezvousAddress> from_sockaddr(const sockaddr* sa, socklen_t len);
  /// 127.0.0.1:port.
  static RendezvousAddress loopback_v4(uint16_t port);
  bool is_loopback() const;
  bool operator==(const RendezvousAddress&) const = default;
};

/// A UniqueId's contents.
struct DecodedId {
  RendezvousAddress address;
  uint64_t job_id = 0;
  std::array<uint8_t, 16> secret{};
};

/// Builds an id for a rendezvous at `address` of job `job_id` with `secret`.
UniqueId encode_unique_id(const RendezvousAddress& address, uint64_t job_id,
                          const std::array<uint8_t, 16>& secret);

/// InvalidArgument "not a weft unique id" on a bad magic or version, or a malformed address.
absl::StatusOr<DecodedId> decode_unique_id(const UniqueId& id);

/// A random 64-bit job id (getrandom(2)); never 0.
uint64_t random_job_id();

/// Splits "host:port" or "[v6]:port"; InvalidArgument naming WEFT_COORDINATOR otherwise.
absl::StatusOr<std::pair<std::string, uint16_t>> split_host_port(const std::string& host_port);

/// The id every rank derives from the same WEFT_COORDINATOR ("host:port"): the host is
/// resolved with getaddrinfo (IPv4 preferred), the job id is a hash of the string, so ranks
/// agree without talking, and the secret is coordinator_secret()'s, never the string's.
absl::StatusOr<UniqueId> unique_id_for_coordinator(const std::string& host_port,
                                                  const EnvLookup& lookup = read_env);

}  // namespace weft
