#include "transport/tcp/address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::transport::tcp {
namespace {

// The numeric form of an IPv4 or IPv6 address inside a sockaddr.
std::string ip_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  const void* raw = sa->sa_family == AF_INET
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  if (inet_ntop(sa->sa_family, raw, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

// Link-local IPv6 addresses need a scope id that a published address cannot carry.
bool usable_ipv6(const sockaddr* sa) {
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  return !IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) && !IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
}

struct IfaddrsDeleter {
  void operator()(ifaddrs* p) const { freeifaddrs(p); }
};
using IfaddrsList = std::unique_ptr<ifaddrs, IfaddrsDeleter>;

absl::StatusOr<IfaddrsList> local_interfaces() {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) {
    return absl::InternalError(
        absl::StrCat("tcp: getifaddrs failed: ", std::strerror(errno), "; set WEFT_SOCKET_IFNAME"));
  }
  return IfaddrsList(raw);
}

// Whether two socket addresses hold the same IP; ports and IPv6 scopes do not count.
bool same_ip(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family != AF_INET6) return false;
  return IN6_ARE_ADDR_EQUAL(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                            &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr);
}

}  // namespace

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
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

bool refuses_connections(std::string_view address, int wait_ms) {
  auto addr = parse_address(address);
  if (!addr.ok()) return false;
  const int fd = ::socket(addr->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool refused = false;
  if (::connect(fd, addr->get(), addr->len) != 0) {
    refused = errno == ECONNREFUSED;
    if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      if (::poll(&p, 1, wait_ms) > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0) {
        refused = err == ECONNREFUSED;
      }
    }
  }
  ::close(fd);
  return refused;
}

std::string format_address(const SockAddr& addr) {
  const std::string ip = ip_string(addr.get());
  if (addr.family() == AF_INET6) return absl::StrCat("[", ip, "]:", addr.port());
  return absl::StrCat(ip, ":", addr.port());
}

absl::StatusOr<std::string> choose_listen_ip(const std::string& ifname) {
  auto list = local_interfaces();
  if (!list.ok()) return list.status();
  const ifaddrs* raw = list->get();

  if (!ifname.empty()) {
    bool seen = false, up = false;
    std::string ipv6;
    std::set<std::string> names;
    for (const ifaddrs* ifa = raw; ifa != nullptr; ifa = ifa->ifa_next) {
      names.insert(ifa->ifa_name);
      if (ifname != ifa->ifa_name) continue;
      seen = true;
      up = (ifa->ifa_flags & IFF_UP) != 0;
      if (!up || ifa->ifa_addr == nullptr) continue;
      if (ifa->ifa_addr->sa_family == AF_INET) return ip_string(ifa->ifa_addr);
      if (ifa->ifa_addr->sa_family == AF_INET6 && ipv6.empty() && usable_ipv6(ifa->ifa_addr)) {
        ipv6 = ip_string(ifa->ifa_addr);
      }
    }
    if (!ipv6.empty()) return ipv6;
    if (!seen) {
      return absl::NotFoundError(absl::StrCat(
          "tcp: WEFT_SOCKET_IFNAME=", ifname, " names no network interface on this host; ",
          "interfaces here: ", absl::StrJoin(names, ", ")));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "tcp: interface ", ifname, " (WEFT_SOCKET_IFNAME) is ", up ? "up but has no IPv4 or "
        "global IPv6 address" : "down", "; pick another interface or bring it up"));
  }

  // Prefer an interface that also has carrier (RUNNING); a bridge without ports is UP only.
  std::string up_only;
  for (const ifaddrs* ifa = raw; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if ((ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0) continue;
    if (std::strncmp(ifa->ifa_name, "docker", 6) == 0) continue;
    if ((ifa->ifa_flags & IFF_RUNNING) != 0) return ip_string(ifa->ifa_addr);
    if (up_only.empty()) up_only = ip_string(ifa->ifa_addr);
  }
  if (!up_only.empty()) return up_only;
  return std::string("127.0.0.1");
}

absl::StatusOr<std::string> interface_holding(const SockAddr& addr) {
  auto list = local_interfaces();
  if (!list.ok()) return list.status();
  for (const ifaddrs* ifa = list->get(); ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr != nullptr && same_ip(ifa->ifa_addr, addr.get())) return ifa->ifa_name;
  }
  return std::string();
}

}  // namespace weft::transport::tcp
