// How a rank's shared memory reaches another process of its host: by a file descriptor (a
// memfd standing in, a CUDA allocation's POSIX handle on a GPU) that the owner passes over a
// Unix socket (SCM_RIGHTS), as NCCL passes its cuMem handles. The memory is reference-counted
// by the kernel or the driver: a peer's mapping outlives the owner's, so an owner may go
// without waiting for its peers.
//
// Who may take a descriptor: a process of the same user that names it with its handle's
// token, a random 128-bit number that travels only in the handle, over the job's
// authenticated links. The socket's name carries a random nonce that also travels only in
// handles, so nobody can take the name first and be asked instead of the owner; the taker
// also checks that the socket is its own user's (SO_PEERCRED). Nothing needs ptrace rights
// (pidfd_getfd did: Yama, seccomp profiles and gVisor refuse it), and nothing is open to
// other processes beyond those terms.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace weft::device {

/// Offers this process's descriptor `fd` to takers: its handle,
/// "weft-fds-PID-NONCE:FD:TOKEN". The owner keeps `fd` open, and calls forget_fd() before it
/// closes it.
std::string fd_handle(int fd);
void forget_fd(int fd);

/// A descriptor of this process for the one a handle names, to be closed by the caller. The
/// owner must hold an FdPost; an error within a few seconds where it does not answer, and
/// one that says what to do where it refuses.
absl::StatusOr<int> take_fd(std::string_view handle);

/// While one lives, this process answers takes of the descriptors it offered: a thread of
/// its own serves the socket "weft-fds-PID-NONCE" (Linux's abstract namespace, so nothing is
/// left on a disk; ranks of one host reach it when they share a network namespace). Made
/// around the exchange of windows only; ranks of one process share one. A child forked
/// meanwhile neither serves nor holds the name.
class FdPost {
 public:
  FdPost();
  ~FdPost();
  FdPost(const FdPost&) = delete;
  FdPost& operator=(const FdPost&) = delete;
};

}  // namespace weft::device
