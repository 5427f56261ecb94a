#include "src/device/shared_fd.hpp"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace weft::device {

std::string fd_handle(int fd) { return absl::StrCat(getpid(), ":", fd); }

absl::StatusOr<int> take_fd(std::string_view handle) {
  const size_t colon = handle.find(':');
  long pid = 0, fd = -1;
  if (colon == std::string_view::npos ||
      std::from_chars(handle.data(), handle.data() + colon, pid).ec != std::errc() ||
      std::from_chars(handle.data() + colon + 1, handle.data() + handle.size(), fd).ec !=
          std::errc() ||
      pid <= 0 || fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(handle), "' is not a shared memory handle (PID:FD)"));
  }
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pidfd < 0) {
    return absl::UnavailableError(absl::StrCat("pidfd_open of process ", pid, ": ",
                                               std::strerror(errno)));
  }
  const int mine = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, static_cast<int>(fd), 0));
  const int err = errno;
  close(pidfd);
  if (mine < 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "pidfd_getfd of descriptor ", fd, " of process ", pid, ": ", std::strerror(err),
        " (ranks of one host must run as one user, and may not be kept from each other by "
        "kernel.yama.ptrace_scope 2 or 3, a seccomp profile or separate PID namespaces; "
        "otherwise set WEFT_CUDA_IPC=off)"));
  }
  return mine;
}

namespace {
std::mutex g_taking_mu;
int g_taking = 0;  // PeersMayTakeFds alive in this process (ranks as threads share it)
}  // namespace

PeersMayTakeFds::PeersMayTakeFds() {
  std::lock_guard<std::mutex> lock(g_taking_mu);
  if (g_taking++ == 0) (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

PeersMayTakeFds::~PeersMayTakeFds() {
  std::lock_guard<std::mutex> lock(g_taking_mu);
  if (--g_taking == 0) (void)prctl(PR_SET_PTRACER, 0, 0, 0, 0);
}

}  // namespace weft::device
