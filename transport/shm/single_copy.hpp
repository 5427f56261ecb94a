// Whether single copy pays on this machine. A large shm send can reach its peer two ways:
// through the ring (the sender copies into shared memory, the receiver copies out) or as an
// offer the receiver reads straight from the sender's buffer with process_vm_readv. The
// kernel pins every 4 KiB page it reads that way, so which is faster depends on the machine:
// on the Xeon and Zen 3 VMs this project ran on before, where memcpy was slow, one read
// beat two copies from 8 KiB; on a Zen 5 VM with a fast memcpy, two copies won at every size
// a collective sends (2-rank allgather 1.3-1.7x, allreduce 1.2-1.3x at 256 KiB-256 MiB).
#pragma once

namespace weft::transport::shm {

/// True when one process_vm_readv of 1 MiB takes less time than two memcpys of it here.
/// Measured once per process, the first time it is asked (about a millisecond), the best
/// of a few tries. On the Zen 5 VM two copies took 0.55-0.65 of the read, run for run.
bool single_copy_pays();

}  // namespace weft::transport::shm
