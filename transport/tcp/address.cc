#include "transport/tcp/address.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace weft::transport::tcp {

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

std::string SockAddr::ip() const {
  char buf[INET6_ADDRSTRLEN] = {};
  const void* raw =
      family() == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  if (inet_ntop(family(), raw, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

SockAddr SockAddr::from(const sockaddr* sa) {
  SockAddr out;
  out.len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(&out.storage, sa, out.len);
  return out;
}

absl::StatusOr<SockAddr> make_sockaddr(const std::string& ip, uint16_t port) {
  SockAddr out;
  auto* in4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  if (inet_pton(AF_INET, ip.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    out.len = sizeof(sockaddr_in);
    return out;
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  if (inet_pton(AF_INET6, ip.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    out.len = sizeof(sockaddr_in6);
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tcp: '", ip, "' is not a numeric IPv4 or IPv6 address"));
}

absl::StatusOr<SockAddr> parse_address(std::string_view text) {
  const std::string s(text);
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tcp: cannot parse peer address '", s, "' (", why,
        "); expected ip:port or [ipv6]:port as published by the peer's tcp transport"));
  };
  std::string host, port_text;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return bad("unterminated [ipv6] or missing port");
    }
    host = s.substr(1, close - 1);
    port_text = s.substr(close + 2);
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string::npos) return bad("missing ':port'");
    host = s.substr(0, colon);
    port_text = s.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("IPv6 addresses need brackets");
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port == 0 || port > 65535) {
    return bad("port must be 1-65535");
  }
  auto addr = make_sockaddr(host, static_cast<uint16_t>(port));
  if (!addr.ok()) return bad("host is not a numeric IP");
  return addr;
}

absl::StatusOr<std::vector<SockAddr>> parse_address_list(std::string_view text) {
  // Count before splitting, so a hostile list cannot make us build a huge vector.
  const size_t entries = 1 + static_cast<size_t>(std::count(text.begin(), text.end(), ','));
  if (entries > kMaxRails) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tcp: the peer published ", entries, " addresses, more than the ", kMaxRails,
        " rails a tcp transport listens on; is every rank running the same weft version?"));
  }
  std::vector<SockAddr> out;
  for (absl::string_view entry : absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    auto addr = parse_address(std::string_view(entry.data(), entry.size()));
    if (!addr.ok()) {
      if (entries == 1) return addr.status();
      return absl::InvalidArgumentError(absl::StrCat(addr.status().message(), " in the list '",
                                                     std::string(text), "'"));
    }
    out.push_back(*addr);
  }
  return out;
}

std::string format_address(const SockAddr& addr) {
  if (addr.family() == AF_INET6) return absl::StrCat("[", addr.ip(), "]:", addr.port());
  return absl::StrCat(addr.ip(), ":", addr.port());
}

std::string format_address_list(const std::vector<SockAddr>& addrs) {
  return absl::StrJoin(addrs, ",", [](std::string* out, const SockAddr& a) {
    out->append(format_address(a));
  });
}

}  // namespace weft::transport::tcp
