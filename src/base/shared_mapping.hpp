// mmap and munmap of shared memory (shm rings, the stand-in copier's windows), telling
// ThreadSanitizer what the kernel guarantees: an address range goes to a new mapping only
// after the mapping that held it is gone.
//
// In the suites whose ranks are threads of one process, a rank's new shm ring often gets
// the addresses of a ring that another rank has just unmapped, and clang 14's
// ThreadSanitizer paired the new ring's writes with that rank's writes to its old ring, as
// if nothing ordered them (CI, stop 58: two ranks' Ring::write to one address, the old
// ring's munmap between them; before it, Ring::create's first writes). So every unmap
// releases, and every map acquires, one tag. Without ThreadSanitizer these are the plain
// calls.
#pragma once

#include <sys/mman.h>

#include <cstddef>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_THREAD_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define WEFT_THREAD_SANITIZER 1
#endif
#ifdef WEFT_THREAD_SANITIZER
#include <sanitizer/tsan_interface.h>
#endif

namespace weft {

#ifdef WEFT_THREAD_SANITIZER
namespace detail {
inline char address_space_tag;
}  // namespace detail
#endif

/// mmap(nullptr, bytes, prot, MAP_SHARED | extra_flags, fd, 0); MAP_FAILED on failure.
inline void* map_shared(int fd, size_t bytes, int prot, int extra_flags = 0) {
  void* p = mmap(nullptr, bytes, prot, MAP_SHARED | extra_flags, fd, 0);
#ifdef WEFT_THREAD_SANITIZER
  if (p != MAP_FAILED) __tsan_acquire(&detail::address_space_tag);
#endif
  return p;
}

/// munmap of what map_shared returned.
inline void unmap_shared(void* p, size_t bytes) {
#ifdef WEFT_THREAD_SANITIZER
  __tsan_release(&detail::address_space_tag);
#endif
  munmap(p, bytes);
}

}  // namespace weft
