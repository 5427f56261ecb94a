// Whether another process of this host still runs: shm links and shrink ask it about peers.
#pragma once

#include <cstdint>

namespace weft {

/// Whether process `pid` still runs; a zombie does not. True when unsure (pid unknown, or
/// not ours to ask), so callers fall back on their deadline.
bool process_alive(int32_t pid);

}  // namespace weft
