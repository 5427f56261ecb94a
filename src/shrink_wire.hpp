// The messages of shrink's agreement (src/shrink.hpp), as they travel over the control links.
//
// Wire format (integers little-endian; N is the old communicator's size, which both ends
// know, so every message but a PeerInfo blob has a length fixed in advance):
//   report    "WSRP" u32 N  u32 from_rank   u8[(N+7)/8] ranks it reached (bit r of byte r/8)
//   decision  "WSDC" u32 N  u64 new_job_id  u8[(N+7)/8] the survivors
//   blob      u32 len, len bytes of PeerInfo::encode() (at most kMaxPeerBlobBytes)
// Unused bits of the last bitmap byte are zero. A decoder refuses anything else, with a
// message for the log: the bytes come from a peer that proved the job secret, but a peer of
// another weft version or a corrupted stream must still not be believed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weft::shrink_wire {

/// Ranks 0..n-1 as a bitmap: set[r] is true for the ranks in the set.
using RankSet = std::vector<bool>;

struct Report {
  int from_rank = -1;
  RankSet reached;  ///< the peers this rank has a control link to
};
struct Decision {
  uint64_t new_job_id = 0;
  RankSet survivors;
};

size_t report_bytes(int n);
size_t decision_bytes(int n);
inline constexpr size_t kBlobHeaderBytes = 4;

std::string encode_report(const Report& r);
std::string encode_decision(const Decision& d);
/// `in` must be exactly report_bytes(n) / decision_bytes(n) long.
absl::StatusOr<Report> decode_report(std::string_view in, int n);
absl::StatusOr<Decision> decode_decision(std::string_view in, int n);
/// The blob length in a blob header; InvalidArgument past kMaxPeerBlobBytes.
absl::StatusOr<uint32_t> decode_blob_length(std::string_view header);
std::string encode_blob(std::string_view blob);

}  // namespace weft::shrink_wire
