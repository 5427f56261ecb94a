// What the bench measures about the machine it runs on, to put its bandwidths in scale.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::tools {

/// Single-core memcpy bandwidth in GB/s (1e9 bytes copied per second): the best of `repeats`
/// copies of `bytes` between two buffers allocated and written once beforehand.
double memcpy_gbps(size_t bytes = size_t{64} << 20, int repeats = 5);

/// The ceiling of the shm transport's single copy: process_vm_readv bandwidth in GB/s, this
/// process reading its own memory (the kernel takes the same path as for a peer: pin the
/// source pages, copy with `rep movsb`), `chunk` bytes per call as the ring reads offers;
/// best of `repeats` passes over `bytes`. 0 where the call is not allowed.
double process_vm_readv_gbps(size_t bytes = size_t{64} << 20, size_t chunk = 256 << 10,
                             int repeats = 5);

/// Whether this rank's stdout reaches a terminal. Open MPI hands each rank a pty for stdout
/// even when mpirun's own stdout is a file or a pipe, so under mpirun the question goes to
/// the parent's stdout (mpirun's, for ranks on its host; false elsewhere).
bool stdout_is_terminal(bool under_mpirun);

/// This process's resident memory (VmRSS of /proc/self/status) in bytes; 0 if unreadable.
uint64_t resident_bytes();

}  // namespace weft::tools
