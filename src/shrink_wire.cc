#include "src/shrink_wire.hpp"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "src/bootstrap.hpp"

namespace weft::shrink_wire {
namespace {

constexpr char kReportMagic[4] = {'W', 'S', 'R', 'P'};
constexpr char kDecisionMagic[4] = {'W', 'S', 'D', 'C'};

size_t bitmap_bytes(int n) { return (static_cast<size_t>(n) + 7) / 8; }

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t get_le(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[at + i])} << (8 * i);
  return v;
}

void put_bitmap(std::string& out, const RankSet& set) {
  std::string bits(bitmap_bytes(static_cast<int>(set.size())), '\0');
  for (size_t r = 0; r < set.size(); ++r) {
    if (set[r]) bits[r / 8] = static_cast<char>(bits[r / 8] | (1 << (r % 8)));
  }
  out += bits;
}

// Reads n bits at `at`; false when a bit past n is set.
bool get_bitmap(std::string_view in, size_t at, int n, RankSet& out) {
  out.assign(static_cast<size_t>(n), false);
  const size_t bytes = bitmap_bytes(n);
  for (size_t i = 0; i < bytes; ++i) {
    const auto byte = static_cast<uint8_t>(in[at + i]);
    for (int b = 0; b < 8; ++b) {
      if ((byte >> b & 1) == 0) continue;
      const size_t r = i * 8 + static_cast<size_t>(b);
      if (r >= static_cast<size_t>(n)) return false;
      out[r] = true;
    }
  }
  return true;
}

// Checks the length, the magic and N, which every fixed-size message starts with.
absl::Status check_head(std::string_view in, const char (&magic)[4], size_t want, int n,
                        const char* what) {
  if (in.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("shrink: a ", what, " of ", in.size(), " bytes, not ", want));
  }
  if (std::memcmp(in.data(), magic, 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shrink: expected a ", what, ", got bytes ",
                                                   absl::CEscape(absl::string_view(in.data(), 4))));
  }
  if (get_le(in, 4, 4) != static_cast<uint64_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat("shrink: a ", what, " for ", get_le(in, 4, 4),
                                                   " ranks in a communicator of ", n));
  }
  return absl::OkStatus();
}

}  // namespace

size_t report_bytes(int n) { return 12 + bitmap_bytes(n); }
size_t decision_bytes(int n) { return 16 + bitmap_bytes(n); }

std::string encode_report(const Report& r) {
  std::string out(kReportMagic, 4);
  put_u32(out, static_cast<uint32_t>(r.reached.size()));
  put_u32(out, static_cast<uint32_t>(r.from_rank));
  put_bitmap(out, r.reached);
  return out;
}

std::string encode_decision(const Decision& d) {
  std::string out(kDecisionMagic, 4);
  put_u32(out, static_cast<uint32_t>(d.survivors.size()));
  put_u64(out, d.new_job_id);
  put_bitmap(out, d.survivors);
  return out;
}

absl::StatusOr<Report> decode_report(std::string_view in, int n) {
  if (absl::Status s = check_head(in, kReportMagic, report_bytes(n), n, "report"); !s.ok()) {
    return s;
  }
  Report r;
  const uint64_t from = get_le(in, 8, 4);
  if (from >= static_cast<uint64_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat("shrink: a report from rank ", from,
                                                   " in a communicator of ", n));
  }
  r.from_rank = static_cast<int>(from);
  if (!get_bitmap(in, 12, n, r.reached)) {
    return absl::InvalidArgumentError("shrink: a report names ranks past the communicator");
  }
  return r;
}

absl::StatusOr<Decision> decode_decision(std::string_view in, int n) {
  if (absl::Status s = check_head(in, kDecisionMagic, decision_bytes(n), n, "decision");
      !s.ok()) {
    return s;
  }
  Decision d;
  d.new_job_id = get_le(in, 8, 8);
  if (!get_bitmap(in, 16, n, d.survivors)) {
    return absl::InvalidArgumentError("shrink: a decision names ranks past the communicator");
  }
  return d;
}

absl::StatusOr<uint32_t> decode_blob_length(std::string_view header) {
  if (header.size() != kBlobHeaderBytes) {
    return absl::InvalidArgumentError("shrink: a blob header must be 4 bytes");
  }
  const auto len = static_cast<uint32_t>(get_le(header, 0, 4));
  if (len > kMaxPeerBlobBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shrink: a peer info blob of ", len,
                                                   " bytes (at most ", kMaxPeerBlobBytes, ")"));
  }
  return len;
}

std::string encode_blob(std::string_view blob) {
  std::string out;
  put_u32(out, static_cast<uint32_t>(blob.size()));
  out += blob;
  return out;
}

}  // namespace weft::shrink_wire
