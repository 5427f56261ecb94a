#include "transport/ucx/address.hpp"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace weft::transport::ucx {

uint64_t link_tag(const JobSecret& secret, uint64_t job_id, int from, int to) {
  const Proof mac = prove(secret, "weft ucx link tag",
                          {absl::StrCat(job_id), absl::StrCat(from), absl::StrCat(to)});
  uint64_t tag;
  std::memcpy(&tag, mac.data(), sizeof tag);
  return tag & ~kTagOffsetBits;
}

}  // namespace weft::transport::ucx
