// The byte copy for the data path.
//
// glibc 2.36's memcpy copies 4 KiB to 1 MiB with `rep movsb` on CPUs that advertise fast
// string moves (FSRM). On AMD Zen 3 (where weft was first measured) that runs at under 3 GB/s
// instead of 40-90 GB/s whenever destination and source differ by 8 or 16 modulo 32 (see
// glibc bug 30994). Ring positions and user offsets produce exactly such pairs, so a
// collective would flip between fast and slow depending on where buffers happen to lie.
// copy_bytes uses plain vector moves in that range on those CPUs (AMD family 0x19: Zen 3
// and Zen 4), and memcpy everywhere else.
#pragma once

#include <cstddef>
#include <cstring>

namespace weft {

/// Whether this CPU's `rep movsb` (memcpy's, and the kernel's for process_vm_readv) runs
/// several times slower when destination and source are out of step modulo 64.
bool rep_movsb_slow_out_of_step();

/// Below this glibc's memcpy copies with vector moves anyway: no `rep movsb`.
inline constexpr size_t kLargeCopyFrom = 2048;

/// Copies `n` bytes (kLargeCopyFrom or more) from `src` to `dst`; the ranges must not overlap.
void copy_large(void* dst, const void* src, size_t n);

/// Copies `n` bytes from `src` to `dst`; the ranges must not overlap. Small copies, several
/// on every small call, go to memcpy inline: out of line, saving the registers the large path
/// needs cost ~20 instructions each.
inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n >= kLargeCopyFrom) {
    copy_large(dst, src, n);
  } else if (n > 0) {  // memcpy wants valid pointers even for nothing; callers pass null
    std::memcpy(dst, src, n);
  }
}

/// As copy_bytes, but the destination bypasses the caches (non-temporal stores): for data
/// far larger than the caches that nobody reads soon. Writing without first reading the
/// old lines saves a third of the memory traffic: 16-17 GB/s against memcpy's 9-10 GB/s for
/// 128 MiB here. The stores are fenced before it returns.
void stream_bytes(void* dst, const void* src, size_t n);

/// The size from which a copy (or a reduction's result) is better streamed than cached: 3/4
/// of one core's share of the last-level cache, glibc's own rule for memcpy, and never
/// below 16 MiB. Below it the result is still in cache when a peer reads it back.
size_t stream_copies_from();

/// For a call's local copy into its output (IdleCopy: a rank's own block placed in its
/// allgather output, a broadcast root's copy): the size of the whole output from which that
/// copy is streamed, half of stream_copies_from(). No peer reads the copy during the call, but
/// whoever reads the output next (the caller, or the peer of the next call in place) finds
/// it in cache while the output fits beside the rest of the call's memory.
size_t stream_output_copies_from();

}  // namespace weft
