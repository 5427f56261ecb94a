// Shared-memory addressing: a rank publishes the prefix of the rings it receives on; the ring
// that carries bytes from rank A to rank B is "<B's prefix>-from-<A>".
#pragma once

#include <cstdint>
#include <string>

namespace weft::transport::shm {

/// "/weft-<job id in hex>-<rank>": every weft segment starts with "/weft-", which is what
/// `weft cleanup` looks for.
std::string ring_prefix(uint64_t job_id, int rank);

/// The segment carrying bytes from `sender` into the rank that published `receiver_prefix`.
std::string ring_name(const std::string& receiver_prefix, int sender);

}  // namespace weft::transport::shm
