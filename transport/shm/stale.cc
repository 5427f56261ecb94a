#include "transport/shm/stale.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/base/shared_mapping.hpp"
#include "transport/shm/pair.hpp"
#include "transport/shm/ring.hpp"

namespace weft::transport::shm {
namespace {

constexpr char kDir[] = "/dev/shm";
constexpr char kPrefix[] = "weft-";

// Reads the creator from the segment's header page, without creating, truncating or keeping
// anything. A header that is not complete (its creator is still writing it) says nothing.
SharedSegment inspect(const std::string& name, int abandoned_after) {
  SharedSegment s;
  s.name = name;
  s.state = "unknown";
  const std::string path = absl::StrCat("/", name);
  const int fd = shm_open(path.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return s;
  struct stat st {};
  const bool stat_ok = fstat(fd, &st) == 0;
  if (stat_ok) s.bytes = st.st_size;
  // Killed before ftruncate, or before the header was ready (magic still zero, or this
  // version's header without its ready bit); another version's header is not ours to judge.
  bool half_made = stat_ok && s.bytes < static_cast<long long>(sizeof(RingHeader));
  if (s.bytes >= static_cast<long long>(sizeof(RingHeader))) {
    void* p = map_shared(fd, sizeof(RingHeader), PROT_READ);
    if (p != MAP_FAILED) {
      const auto* h = static_cast<const RingHeader*>(p);
      const bool ready = h->state.load(std::memory_order_acquire) & RingHeader::kReady;
      half_made = h->magic == 0 ||
                  (h->magic == RingHeader::kMagic && h->version == RingHeader::kVersion && !ready);
      // A pid means something only in its own namespace: another container's rings in a
      // shared /dev/shm are not ours to judge.
      if (ready && h->magic == RingHeader::kMagic && h->version == RingHeader::kVersion &&
          h->creator_pidns == own_pid_namespace() && h->creator_pidns != 0) {
        s.creator_pid = h->creator_pid;
        s.state = process_alive(s.creator_pid) ? "live" : "stale";
      }
      unmap_shared(p, sizeof(RingHeader));
    }
  }
  close(fd);
  if (s.state == "unknown" && half_made && time(nullptr) - st.st_ctime >= abandoned_after) {
    s.state = "abandoned";
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<SharedSegment>> sweep_stale_rings(bool dry_run, int abandoned_after) {
  DIR* dir = opendir(kDir);
  if (dir == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot list ", kDir, ": ", std::strerror(errno)));
  }
  std::vector<SharedSegment> out;
  while (const dirent* e = readdir(dir)) {
    if (!absl::StartsWith(e->d_name, kPrefix)) continue;
    SharedSegment s = inspect(e->d_name, abandoned_after);
    if ((s.state == "stale" || s.state == "abandoned") && !dry_run) {
      s.removed = shm_unlink(absl::StrCat("/", s.name).c_str()) == 0;
    }
    out.push_back(std::move(s));
  }
  closedir(dir);
  return out;
}

void sweep_stale_rings_once() {
  static std::once_flag once;
  std::call_once(once, [] { sweep_stale_rings(/*dry_run=*/false).IgnoreError(); });
}

}  // namespace weft::transport::shm
