#include "src/unique_id.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "src/coordinator_secret.hpp"

namespace weft {
namespace {

constexpr uint8_t kMagic[4] = {'W', 'E', 'F', 'T'};
constexpr size_t kFamilyAt = 6, kPortAt = 8, kAddressAt = 10, kJobAt = 32, kSecretAt = 40;

template <typename T>
void put_le(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename T>
T get_le(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}

void fill_random(uint8_t* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(p + got, n - got, 0);
    if (r <= 0) break;  // ENOSYS or a seccomp filter: fall back below
    got += static_cast<size_t>(r);
  }
  if (got < n) {
    std::random_device rd;
    for (; got < n; ++got) p[got] = static_cast<uint8_t>(rd());
  }
}

// FNV-1a: stable across processes and builds (absl::Hash is seeded per process, so it
// cannot be used for values that ranks must agree on).
uint64_t fnv1a(std::string_view salt, std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::string_view part : {salt, s}) {
    for (unsigned char c : part) h = (h ^ c) * 0x100000001b3ull;
  }
  return h;
}

absl::Status not_weft_id(std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "not a weft unique id (", std::string(why),
      "); pass every rank the bytes that weft::make_unique_id returned, unchanged"));
}

}  // namespace

std::string RendezvousAddress::to_string() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == 6 ? AF_INET6 : AF_INET, address.data(), buf, sizeof(buf));
  return family == 6 ? absl::StrCat("[", buf, "]:", port) : absl::StrCat(buf, ":", port);
}

socklen_t RendezvousAddress::to_sockaddr(sockaddr_storage& out) const {
  std::memset(&out, 0, sizeof(out));
  if (family == 6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    std::memcpy(&a->sin6_addr, address.data(), 16);
    return sizeof(sockaddr_in6);
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&out);
  a->sin_family = AF_INET;
  a->sin_port = htons(port);
  std::memcpy(&a->sin_addr, address.data(), 4);
  return sizeof(sockaddr_in);
}

absl::StatusOr<RendezvousAddress> RendezvousAddress::from_sockaddr(const sockaddr* sa,
                                                                   socklen_t len) {
  RendezvousAddress r;
  if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(sa);
    r.family = 4;
    r.port = ntohs(a->sin_port);
    std::memcpy(r.address.data(), &a->sin_addr, 4);
    return r;
  }
  if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(sa);
    r.family = 6;
    r.port = ntohs(a->sin6_port);
    std::memcpy(r.address.data(), &a->sin6_addr, 16);
    return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("address family ", sa->sa_family, " is neither IPv4 nor IPv6"));
}

RendezvousAddress RendezvousAddress::loopback_v4(uint16_t port) {
  RendezvousAddress r;
  r.address[0] = 127;
  r.address[3] = 1;
  r.port = port;
  return r;
}

bool RendezvousAddress::is_loopback() const {
  if (family == 4) return address[0] == 127;
  static constexpr std::array<uint8_t, 16> kV6Loopback = {0, 0, 0, 0, 0, 0, 0, 0,
                                                          0, 0, 0, 0, 0, 0, 0, 1};
  return address == kV6Loopback;
}

UniqueId encode_unique_id(const RendezvousAddress& address, uint64_t job_id,
                          const std::array<uint8_t, 16>& secret) {
  UniqueId id;
  uint8_t* b = id.bytes.data();
  std::memcpy(b, kMagic, 4);
  put_le<uint16_t>(b + 4, kUniqueIdVersion);
  put_le<uint16_t>(b + kFamilyAt, static_cast<uint16_t>(address.family));
  put_le<uint16_t>(b + kPortAt, address.port);
  std::memcpy(b + kAddressAt, address.address.data(), 16);
  put_le<uint64_t>(b + kJobAt, job_id);
  std::memcpy(b + kSecretAt, secret.data(), secret.size());
  return id;
}

absl::StatusOr<DecodedId> decode_unique_id(const UniqueId& id) {
  const uint8_t* b = id.bytes.data();
  if (std::memcmp(b, kMagic, 4) != 0) return not_weft_id("bad magic");
  const uint16_t version = get_le<uint16_t>(b + 4);
  if (version != kUniqueIdVersion) {
    return not_weft_id(absl::StrCat("version ", version, ", this weft reads version ",
                                    kUniqueIdVersion));
  }
  DecodedId d;
  d.address.family = get_le<uint16_t>(b + kFamilyAt);
  d.address.port = get_le<uint16_t>(b + kPortAt);
  std::memcpy(d.address.address.data(), b + kAddressAt, 16);
  if (d.address.family != 4 && d.address.family != 6) {
    return not_weft_id(absl::StrCat("address family ", d.address.family));
  }
  if (d.address.port == 0) return not_weft_id("port 0");
  d.job_id = get_le<uint64_t>(b + kJobAt);
  std::memcpy(d.secret.data(), b + kSecretAt, 16);
  // Reserved bytes are zero in every id weft makes; anything else was damaged on its way.
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    const bool reserved = (i >= kAddressAt + 16 && i < kJobAt) || i >= kSecretAt + 16;
    if (reserved && b[i] != 0) return not_weft_id(absl::StrCat("reserved byte ", i, " is not zero"));
  }
  return d;
}

uint64_t random_job_id() {
  uint64_t v = 0;
  while (v == 0) fill_random(reinterpret_cast<uint8_t*>(&v), sizeof(v));
  return v;
}

absl::StatusOr<std::pair<std::string, uint16_t>> split_host_port(const std::string& hp) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("WEFT_COORDINATOR=", hp, " ", std::string(why),
                     "; give rank 0's host and a free port, e.g. node0:29500"));
  };
  const size_t colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("is not host:port");
  std::string host = hp.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return bad("has an unclosed [IPv6] host");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad("has an IPv6 host without [brackets]");
  }
  const std::string port_s = hp.substr(colon + 1);
  int port = 0;
  if (port_s.empty() || port_s.size() > 5) return bad("has no valid port");
  for (char c : port_s) {
    if (c < '0' || c > '9') return bad("has no valid port");
    port = port * 10 + (c - '0');
  }
  if (port == 0 || port > 65535) return bad("has a port outside 1-65535");
  return std::make_pair(host, static_cast<uint16_t>(port));
}

absl::StatusOr<UniqueId> unique_id_for_coordinator(const std::string& host_port,
                                                  const EnvLookup& lookup) {
  auto hp = split_host_port(host_port);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(hp->first.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve the host of WEFT_COORDINATOR=",
                                               host_port, ": ", gai_strerror(rc),
                                               "; use an IP address or a name every node knows"));
  }
  // Prefer IPv4: it is what clusters route, and what rank 0 listens on by default.
  const addrinfo* pick = res;
  for (const addrinfo* p = res; p != nullptr; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      pick = p;
      break;
    }
  }
  auto addr = RendezvousAddress::from_sockaddr(pick->ai_addr, pick->ai_addrlen);
  freeaddrinfo(res);
  if (!addr.ok()) return addr.status();
  addr->port = hp->second;
  // The job id may be derived from the address (it names the job, it proves nothing); the
  // secret must not be (src/coordinator_secret.hpp).
  auto secret = coordinator_secret(lookup);
  if (!secret.ok()) return secret.status();
  return encode_unique_id(*addr, fnv1a("weft-job:", host_port) | 1, secret->secret);
}

}  // namespace weft
