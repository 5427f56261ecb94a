#include "tools/host.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <sys/uio.h>
#include <unistd.h>

namespace weft::tools {

namespace {

// The best of `repeats` runs of copy(dst, src) over `bytes`, in GB/s; 0 when a copy fails or
// does not arrive. The buffers are allocated and written once beforehand.
template <class Copy>
double best_gbps(size_t bytes, int repeats, Copy copy) {
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes, std::byte{0});
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!copy(dst.data(), src.data())) return 0;
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    // Read the copy back so the compiler cannot drop it.
    if (dst[bytes / 2] != std::byte{1}) return 0;
    if (took.count() > 0) best = std::max(best, static_cast<double>(bytes) / took.count() / 1e9);
  }
  return best;
}

}  // namespace

double memcpy_gbps(size_t bytes, int repeats) {
  return best_gbps(bytes, repeats, [&](std::byte* dst, const std::byte* src) {
    std::memcpy(dst, src, bytes);
    return true;
  });
}

double process_vm_readv_gbps(size_t bytes, size_t chunk, int repeats) {
  return best_gbps(bytes, repeats, [&](std::byte* dst, const std::byte* src) {
    for (size_t at = 0; at < bytes; at += chunk) {
      const size_t n = std::min(chunk, bytes - at);
      const iovec local{dst + at, n};
      const iovec remote{const_cast<std::byte*>(src) + at, n};
      if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(n)) return false;
    }
    return true;
  });
}

bool stdout_is_terminal(bool under_mpirun) {
  if (!isatty(STDOUT_FILENO)) return false;
  if (!under_mpirun) return true;
  const std::string fd = "/proc/" + std::to_string(getppid()) + "/fd/1";
  char target[256];
  const ssize_t len = readlink(fd.c_str(), target, sizeof target - 1);
  if (len <= 0) return false;
  const std::string path(target, static_cast<size_t>(len));
  return path.rfind("/dev/pts/", 0) == 0 || path.rfind("/dev/tty", 0) == 0;
}

uint64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return static_cast<uint64_t>(kib) * 1024;
}

}  // namespace weft::tools
