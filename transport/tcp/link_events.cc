#include "transport/tcp/link_events.hpp"

#include <sys/socket.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "transport/tcp/rails.hpp"

namespace weft::transport::tcp {
namespace {

void print_line(const std::string& line) {
  const std::string stamp = absl::FormatTime("%Y-%m-%dT%H:%M:%E3S", absl::Now(), absl::UTCTimeZone());
  std::fprintf(stderr, "weft %s %s\n", stamp.c_str(), line.c_str());
}

// "path 1 (weft-r1)": the interface the path's socket left from, looked up only when a path
// fails (a few system calls).
std::string describe(const Path& path) {
  SockAddr local;
  socklen_t len = sizeof local.storage;
  if (getsockname(path.fd(), reinterpret_cast<sockaddr*>(&local.storage), &len) != 0) {
    return path.name();
  }
  local.len = len;
  auto ifname = interface_holding(local);
  if (!ifname.ok() || ifname->empty()) return path.name();
  return absl::StrCat(path.name(), " (", *ifname, ")");
}

}  // namespace

void LinkEvents::path_lost(const char* side, const Path& path, uint64_t at) {
  path_failures.add(1);
  print_line(absl::StrCat("link rank ", self_, " -> rank ", peer_, ": ", describe(path),
                          " lost while ", side, " at stream offset ", at, ": ", path.cause()));
}

void LinkEvents::resumed(uint32_t epoch, uint64_t from, uint64_t resent, const std::string& why,
                         const std::string& live, bool quiet) {
  resumptions.add(1);
  bytes_resent.add(resent);
  if (quiet) return;
  print_line(absl::StrCat("link rank ", self_, " -> rank ", peer_, ": resuming at offset ", from,
                          " (epoch ", epoch, ", ", resent, " bytes to send again) over ", live,
                          ": ", why));
}

void LinkEvents::checksum_mismatch(const Path& path, uint64_t offset, uint32_t length) {
  checksum_errors.add(1);
  // Counted always, printed rarely: a storm of mismatches would flood the log.
  const uint64_t n = checksum_errors.get();
  if ((n & (n - 1)) != 0) return;
  print_line(absl::StrCat("link rank ", peer_, " -> rank ", self_, ": CRC32C mismatch #", n,
                          " in ", length, " bytes at stream offset ", offset, " on ",
                          path.name(), "; asked for them again"));
}

absl::Status LinkEvents::no_path_left(const char* side, const std::vector<Path*>& paths) const {
  std::vector<std::string> tried;
  for (const Path* p : paths) tried.push_back(absl::StrCat(p->name(), ": ", p->cause()));
  return absl::UnavailableError(absl::StrCat(
      "tcp: the link from rank ", self_, " to rank ", peer_, " at ", peer_address_,
      " has no path left for ", side, " (tried ", absl::StrJoin(tried, "; "), "); rank ", peer_,
      " has probably exited or crashed (check its log), or every network between them failed"));
}

void LinkEvents::stranded(int wait_ms) {
  print_line(absl::StrCat("link rank ", self_, " -> rank ", peer_,
                          ": every path timed out; waiting up to ", wait_ms,
                          " ms for a path through another rank (WEFT_RELAY_PATHS)"));
}

void LinkEvents::path_added(const Path& path, const std::string& via) {
  print_line(absl::StrCat("link rank ", self_, " -> rank ", peer_, ": ", path.name(),
                          " added through ", via));
}

}  // namespace weft::transport::tcp
