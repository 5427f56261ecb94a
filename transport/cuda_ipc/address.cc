#include "transport/cuda_ipc/address.hpp"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace weft::transport::cuda_ipc {
namespace {
constexpr size_t kHeader = 3;
constexpr size_t kMostText = Address::kBytes - kHeader;
}  // namespace

absl::Status Address::encode(std::byte* out) const {
  const bool has = !handle.empty();
  if (has && handle.size() > kMostText) {
    return absl::InternalError(absl::StrCat("a cuda_ipc handle of ", handle.size(),
                                            " bytes does not fit its record of ", kBytes));
  }
  const std::string& text = has ? handle : why_not;
  const size_t n = std::min(text.size(), kMostText);
  std::memset(out, 0, kBytes);
  out[0] = std::byte{has ? uint8_t{1} : uint8_t{0}};
  out[1] = std::byte(n & 0xff);
  out[2] = std::byte(n >> 8);
  std::memcpy(out + kHeader, text.data(), n);
  return absl::OkStatus();
}

absl::StatusOr<Address> Address::decode(const std::byte* in) {
  const auto kind = static_cast<uint8_t>(in[0]);
  const size_t n = static_cast<size_t>(in[1]) | static_cast<size_t>(in[2]) << 8;
  if (kind > 1 || n > kMostText || (kind == 1 && n == 0)) {
    return absl::DataLossError(absl::StrCat("a malformed cuda_ipc address (kind ", kind,
                                            ", length ", n, ")"));
  }
  std::string text(reinterpret_cast<const char*>(in + kHeader), n);
  Address a;
  (kind == 1 ? a.handle : a.why_not) = std::move(text);
  return a;
}

}  // namespace weft::transport::cuda_ipc
