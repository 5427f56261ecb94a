// How a rank's shared memory reaches another process of its host: by a file descriptor
// (a memfd standing in, a CUDA allocation's POSIX handle on a GPU) that the peer copies out of
// the owner's process with pidfd_getfd, allowed on the terms of ptrace (the same user, as
// shm's single copy needs too). The memory is reference-counted by the kernel or the driver:
// a peer's mapping outlives the owner's, so an owner may go without waiting for its peers.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weft::device {

/// The handle of this process's descriptor `fd`: "PID:FD".
std::string fd_handle(int fd);

/// A descriptor of this process for the one a handle names, to be closed by the caller; an
/// error that says what to do where the kernel refuses (another user, ptrace restricted).
absl::StatusOr<int> take_fd(std::string_view handle);

/// While one lives, processes of this user may take this process's descriptors: under Yama's
/// ptrace_scope 1 (Ubuntu's default) only an ancestor could, and ranks are siblings. Made
/// around the exchange of windows only (PR_SET_PTRACER_ANY, then none again once the last
/// one in this process goes); does nothing where Yama is not there.
class PeersMayTakeFds {
 public:
  PeersMayTakeFds();
  ~PeersMayTakeFds();
  PeersMayTakeFds(const PeersMayTakeFds&) = delete;
  PeersMayTakeFds& operator=(const PeersMayTakeFds&) = delete;
};

}  // namespace weft::device
