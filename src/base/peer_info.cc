#include "src/base/peer_info.hpp"

#include <unistd.h>

#include <climits>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace weft {
namespace {

// Blob layout: u32 rank, i32 pid, then length-prefixed (u32) strings: host id, number of
// addresses (u32), and per address its transport name and value; the GPU's bus id, the
// number of rail ports (u32) and each port.
constexpr uint32_t kMaxString = 1 << 16;
constexpr uint32_t kMaxAddresses = 64;

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_str(std::string& out, std::string_view s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

struct Reader {
  std::string_view in;
  bool u32(uint32_t& v) {
    if (in.size() < 4) return false;
    std::memcpy(&v, in.data(), 4);
    in.remove_prefix(4);
    return true;
  }
  bool str(std::string& s) {
    uint32_t n = 0;
    if (!u32(n) || n > kMaxString || in.size() < n) return false;
    s.assign(in.substr(0, n));
    in.remove_prefix(n);
    return true;
  }
};

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

std::string PeerInfo::address_of(std::string_view transport) const {
  for (const auto& [name, value] : addresses) {
    if (name == transport) return value;
  }
  return "";
}

std::string PeerInfo::encode() const {
  std::string out;
  put_u32(out, static_cast<uint32_t>(rank));
  put_u32(out, static_cast<uint32_t>(pid));
  put_str(out, host_id);
  put_u32(out, static_cast<uint32_t>(addresses.size()));
  for (const auto& [name, value] : addresses) {
    put_str(out, name);
    put_str(out, value);
  }
  put_str(out, gpu_bus_id);
  put_u32(out, static_cast<uint32_t>(rail_ports.size()));
  for (const std::string& port : rail_ports) put_str(out, port);
  return out;
}

absl::StatusOr<PeerInfo> PeerInfo::decode(std::string_view blob) {
  Reader r{blob};
  PeerInfo p;
  uint32_t rank = 0, pid = 0, n = 0;
  bool ok = r.u32(rank) && r.u32(pid) && r.str(p.host_id) && r.u32(n);
  if (ok && (rank > INT_MAX || n > kMaxAddresses)) ok = false;
  for (uint32_t i = 0; ok && i < n; ++i) {
    std::string name, value;
    ok = r.str(name) && r.str(value);
    p.addresses.emplace_back(std::move(name), std::move(value));
  }
  uint32_t ports = 0;
  ok = ok && r.str(p.gpu_bus_id) && r.u32(ports) && ports <= kMaxAddresses;
  for (uint32_t i = 0; ok && i < ports; ++i) ok = r.str(p.rail_ports.emplace_back());
  if (!ok || !r.in.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed peer info (", blob.size(), " bytes); is every rank running the "
                     "same weft version?"));
  }
  p.rank = static_cast<int>(rank);
  p.pid = static_cast<int32_t>(pid);
  return p;
}

std::string local_host_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string id = absl::StrCat(host, "/", read_first_line("/proc/sys/kernel/random/boot_id"));
  // Ranks share memory only within one network, IPC and PID namespace: a virtual-cluster
  // host is a network namespace, /dev/shm follows the IPC namespace, and the shm transport
  // checks peer liveness by pid.
  for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/ipc", "/proc/self/ns/pid"}) {
    char link[128] = {};
    const ssize_t n = readlink(ns, link, sizeof(link) - 1);
    absl::StrAppend(&id, "/", n > 0 ? std::string(link, n) : std::string("?"));
  }
  return id;
}

std::string_view machine_of(std::string_view host_id) {
  const size_t start = host_id.find('/');
  if (start == std::string_view::npos) return host_id;
  const size_t end = host_id.find('/', start + 1);
  return host_id.substr(start + 1, end == std::string_view::npos ? end : end - start - 1);
}

}  // namespace weft
