// A loopback port for a test to hand out before anything listens on it (a coordinator's,
// say), chosen below the kernel's ephemeral range (net.ipv4.ip_local_port_range). A port the
// kernel picked for a socket bound to port 0 and then closed may be picked again at once
// for the next such socket: a rank's own listener once took the coordinator's port that way,
// and the rank dialed itself for the rendezvous.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <random>

namespace weft::testing {

/// A free loopback port outside the ephemeral range, or the kernel's pick where that range
/// leaves too little room below it; 0 when none could be bound.
inline uint16_t free_loopback_port() {
  const auto try_bind = [](uint16_t want) -> uint16_t {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(want);
    socklen_t len = sizeof a;
    uint16_t port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    ::close(fd);
    return port;
  };
  int ephemeral_low = 32768;  // Linux's default
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &ephemeral_low) != 1) ephemeral_low = 32768;
    std::fclose(f);
  }
  constexpr int kLowest = 10000;  // clear of well-known and registered services' usual ports
  if (ephemeral_low - kLowest < 1000) return try_bind(0);
  std::mt19937 pick{std::random_device{}()};
  std::uniform_int_distribution<int> in_range(kLowest, ephemeral_low - 1);
  for (int attempt = 0; attempt < 64; ++attempt) {
    if (const uint16_t port = try_bind(static_cast<uint16_t>(in_range(pick))); port != 0) return port;
  }
  return try_bind(0);
}

}  // namespace weft::testing
