// What a rank publishes for cuda_ipc: the handle of its window (device memory its peers map),
// or why it has none. Exchanged as fixed-size records in one host allgather when a
// communicator first orders a call on a stream (src/ipc_path.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace weft::transport::cuda_ipc {

struct Address {
  std::string handle;   ///< device::Copier::share_memory's; empty: this rank has no window
  std::string why_not;  ///< why it has none, for the line that says cuda_ipc is off

  /// Bytes of an encoded record: u8 1 (a handle follows) or 0 (a reason follows), u16 length
  /// (little-endian), the text, zeros. A longer reason is cut; a longer handle is an error.
  static constexpr size_t kBytes = 256;
  absl::Status encode(std::byte* out) const;
  /// An error for a record no encode() wrote.
  static absl::StatusOr<Address> decode(const std::byte* in);
};

}  // namespace weft::transport::cuda_ipc
