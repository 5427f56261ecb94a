#include "transport/shm/address.hpp"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft::transport::shm {

std::string ring_prefix(uint64_t job_id, int rank) {
  return absl::StrFormat("/weft-%016x-%d", job_id, rank);
}

std::string ring_name(const std::string& receiver_prefix, int sender) {
  return absl::StrCat(receiver_prefix, "-from-", sender);
}

}  // namespace weft::transport::shm
