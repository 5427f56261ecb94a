#include "transport/tcp/rails.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace weft::transport::tcp {
namespace {

struct IfaddrsDeleter {
  void operator()(ifaddrs* p) const { freeifaddrs(p); }
};

// One interface as getifaddrs lists it (one entry per address), folded into one record.
struct Interface {
  std::string name;
  unsigned flags = 0;
  std::optional<Rail> ipv4, ipv6;  // the first of each

  bool up() const { return (flags & IFF_UP) != 0; }
  const std::optional<Rail>& best() const { return ipv4 ? ipv4 : ipv6; }
};

int prefix_bits(const sockaddr* netmask) {
  if (netmask == nullptr) return 0;
  const uint8_t* bytes;
  size_t n;
  if (netmask->sa_family == AF_INET) {
    bytes = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(netmask)->sin_addr);
    n = 4;
  } else if (netmask->sa_family == AF_INET6) {
    bytes = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(netmask)->sin6_addr);
    n = 16;
  } else {
    return 0;
  }
  int bits = 0;
  for (size_t i = 0; i < n; ++i) bits += __builtin_popcount(bytes[i]);
  return bits;
}

// Link-local IPv6 addresses need a scope id that a published address cannot carry.
bool usable_ipv6(const sockaddr* sa) {
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  return !IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) && !IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
}

absl::StatusOr<std::vector<Interface>> list_interfaces() {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) {
    return absl::InternalError(
        absl::StrCat("tcp: getifaddrs failed: ", std::strerror(errno), "; set WEFT_SOCKET_IFNAME"));
  }
  std::unique_ptr<ifaddrs, IfaddrsDeleter> list(raw);
  std::vector<Interface> out;
  for (const ifaddrs* ifa = raw; ifa != nullptr; ifa = ifa->ifa_next) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const Interface& i) { return i.name == ifa->ifa_name; });
    if (it == out.end()) {
      it = out.emplace(out.end());
      it->name = ifa->ifa_name, it->flags = ifa->ifa_flags;
    }
    const sockaddr* sa = ifa->ifa_addr;
    if (sa == nullptr) continue;
    Rail rail{ifa->ifa_name, SockAddr::from(sa), prefix_bits(ifa->ifa_netmask)};
    if (sa->sa_family == AF_INET && !it->ipv4) it->ipv4 = rail;
    if (sa->sa_family == AF_INET6 && !it->ipv6 && usable_ipv6(sa)) it->ipv6 = rail;
  }
  return out;
}

// No WEFT_SOCKET_IFNAME. Prefer an interface that also has carrier (RUNNING); a bridge
// without ports is UP only.
Rail default_rail(const std::vector<Interface>& interfaces) {
  const Rail* up_only = nullptr;
  for (const Interface& i : interfaces) {
    if (!i.ipv4 || !i.up() || (i.flags & IFF_LOOPBACK) != 0) continue;
    if (absl::StartsWith(i.name, "docker")) continue;
    if ((i.flags & IFF_RUNNING) != 0) return *i.ipv4;
    if (up_only == nullptr) up_only = &*i.ipv4;
  }
  if (up_only != nullptr) return *up_only;
  return Rail{"lo", *make_sockaddr("127.0.0.1", 0), 8};
}

// The rails one entry of WEFT_SOCKET_IFNAME names; `spec` is the whole variable, for errors.
absl::StatusOr<std::vector<Rail>> rails_of(const std::vector<Interface>& interfaces,
                                           const std::string& entry, const std::string& spec) {
  auto exact = std::find_if(interfaces.begin(), interfaces.end(),
                            [&](const Interface& i) { return i.name == entry; });
  if (exact != interfaces.end()) {
    if (exact->up() && exact->best()) return std::vector<Rail>{*exact->best()};
    return absl::FailedPreconditionError(absl::StrCat(
        "tcp: interface ", entry, " (WEFT_SOCKET_IFNAME) is ",
        exact->up() ? "up but has no IPv4 or global IPv6 address" : "down",
        "; pick another interface or bring it up"));
  }
  std::vector<Rail> out;
  std::vector<std::string> unusable;
  for (const Interface& i : interfaces) {
    if (!absl::StartsWith(i.name, entry)) continue;
    if (i.up() && i.best()) {
      out.push_back(*i.best());
    } else {
      unusable.push_back(i.name);
    }
  }
  // Numbered as people number them (eth2 before eth10), not in the kernel's index order.
  std::sort(out.begin(), out.end(), [](const Rail& a, const Rail& b) {
    return a.ifname.size() != b.ifname.size() ? a.ifname.size() < b.ifname.size()
                                              : a.ifname < b.ifname;
  });
  if (!out.empty()) return out;
  if (!unusable.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tcp: the interfaces starting with ", entry, " (WEFT_SOCKET_IFNAME) are all down or "
        "without an IPv4 or global IPv6 address: ", absl::StrJoin(unusable, ", "),
        "; pick other interfaces or bring them up"));
  }
  std::set<std::string> names;
  for (const Interface& i : interfaces) names.insert(i.name);
  const std::string head = entry == spec ? absl::StrCat("WEFT_SOCKET_IFNAME=", spec)
                                         : absl::StrCat(entry, " (in WEFT_SOCKET_IFNAME=", spec, ")");
  return absl::NotFoundError(absl::StrCat("tcp: ", head, " names no network interface on this ",
                                          "host; interfaces here: ", absl::StrJoin(names, ", ")));
}

bool same_ip(const SockAddr& a, const SockAddr& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(&a.storage)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b.storage)->sin_addr, 4) == 0;
  }
  return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a.storage)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(&b.storage)->sin6_addr, 16) == 0;
}

}  // namespace

absl::StatusOr<std::vector<Rail>> choose_rails(const std::string& ifnames) {
  auto interfaces = list_interfaces();
  if (!interfaces.ok()) return interfaces.status();
  std::vector<Rail> rails;
  for (absl::string_view raw : absl::StrSplit(ifnames, ',', absl::SkipWhitespace())) {
    const std::string entry(absl::StripAsciiWhitespace(raw));
    auto named = rails_of(*interfaces, entry, ifnames);
    if (!named.ok()) return named.status();
    for (Rail& r : *named) {
      // One interface named twice, or two holding one address, is still one path.
      const bool repeat = std::any_of(rails.begin(), rails.end(), [&](const Rail& have) {
        return have.ifname == r.ifname || same_ip(have.addr, r.addr);
      });
      if (!repeat) rails.push_back(std::move(r));
    }
  }
  if (rails.empty()) rails.push_back(default_rail(*interfaces));
  if (rails.size() > kMaxRails) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tcp: WEFT_SOCKET_IFNAME=", ifnames, " names ", rails.size(), " interfaces; a rank uses "
        "at most ", kMaxRails, " rails: name fewer, or use a longer prefix"));
  }
  return rails;
}

absl::StatusOr<std::string> choose_listen_ip(const std::string& ifnames) {
  auto rails = choose_rails(ifnames);
  if (!rails.ok()) return rails.status();
  return rails->front().addr.ip();
}

absl::StatusOr<std::string> interface_holding(const SockAddr& addr) {
  ifaddrs* raw = nullptr;
  if (getifaddrs(&raw) != 0) {
    return absl::InternalError(absl::StrCat("tcp: getifaddrs failed: ", std::strerror(errno)));
  }
  std::unique_ptr<ifaddrs, IfaddrsDeleter> list(raw);
  for (const ifaddrs* ifa = raw; ifa != nullptr; ifa = ifa->ifa_next) {
    const sockaddr* sa = ifa->ifa_addr;
    if (sa == nullptr || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) continue;
    if (same_ip(SockAddr::from(sa), addr)) return std::string(ifa->ifa_name);
  }
  return std::string();
}

bool on_rail(const Rail& rail, const SockAddr& addr) {
  if (rail.addr.family() != addr.family()) return false;
  const uint8_t* a;
  const uint8_t* b;
  int bits_max;
  if (addr.family() == AF_INET) {
    a = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&rail.addr.storage)->sin_addr);
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(&addr.storage)->sin_addr);
    bits_max = 32;
  } else if (addr.family() == AF_INET6) {
    a = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(&rail.addr.storage)->sin6_addr);
    b = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(&addr.storage)->sin6_addr);
    bits_max = 128;
  } else {
    return false;
  }
  const int bits = std::clamp(rail.prefix_bits, 0, bits_max);
  const int whole = bits / 8, rest = bits % 8;
  if (std::memcmp(a, b, whole) != 0) return false;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

std::vector<Route> plan_routes(const std::vector<Rail>& local, const std::vector<SockAddr>& remote,
                               size_t max_routes) {
  std::vector<Route> routes;
  std::vector<bool> taken(remote.size(), false);
  for (size_t i = 0; i < local.size() && routes.size() < max_routes; ++i) {
    for (size_t j = 0; j < remote.size(); ++j) {
      if (taken[j] || !on_rail(local[i], remote[j])) continue;
      taken[j] = true;
      routes.push_back({static_cast<int>(i), j});
      break;
    }
  }
  if (routes.empty()) routes.push_back({-1, 0});
  return routes;
}

}  // namespace weft::transport::tcp
