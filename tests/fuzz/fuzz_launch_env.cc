// Fuzzes read_launch_info (src/launch_env.hpp): it parses whatever the launcher (or a user)
// put in the environment, so any values must give a LaunchInfo or an error, never a crash.
// Input: lines "NAME=value" (any bytes but newline); the fake environment serves them
// through the EnvLookup parameter, first line per name wins, other names are unset. Seeds
// name the variables read_launch_info reads. When it succeeds, the documented ranges hold:
// 0 <= rank < size <= kMaxLaunchSize, 0 <= local_rank < size, local_size is -1 or >= 1,
// and local_rank < local_size when local_size is known.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "src/launch_env.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string, std::less<>> env;  // at most one entry per input line
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (!in.empty()) {
    const size_t end = std::min(in.find('\n'), in.size());
    const std::string_view line = in.substr(0, end);
    in.remove_prefix(std::min(end + 1, in.size()));
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  const weft::EnvLookup lookup = [&env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto info = weft::read_launch_info(lookup);
  if (!info.ok()) return 0;
  if (info->size < 1 || info->size > weft::kMaxLaunchSize || info->rank < 0 ||
      info->rank >= info->size || info->local_rank < 0 || info->local_rank >= info->size ||
      (info->local_size != -1 && info->local_size < 1) ||
      (info->local_size > 0 && info->local_rank >= info->local_size) ||
      (info->launcher != "weft" && info->launcher != "mpirun" && info->launcher != "slurm")) {
    __builtin_trap();
  }
  return 0;
}
