#include "src/base/process.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace weft {

bool process_alive(int32_t pid) {
  if (pid <= 0) return true;  // unknown: rely on the deadline
  if (kill(pid, 0) != 0) return errno != ESRCH;
  // A dead process that its parent has not reaped yet is a zombie ("Z" in /proc/PID/stat)
  // and still answers kill(pid, 0).
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;
  char stat[256] = {};
  const size_t n = std::fread(stat, 1, sizeof(stat) - 1, f);
  std::fclose(f);
  // The state follows the command name, which is in parentheses and may contain spaces.
  const char* close = std::strrchr(stat, ')');
  return close == nullptr || close + 2 >= stat + n || close[2] != 'Z';
}

}  // namespace weft
