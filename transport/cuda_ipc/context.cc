#include "transport/cuda_ipc/context.hpp"

#include "absl/strings/str_cat.h"

namespace weft::transport::cuda_ipc {

Context::Context(device::Copier& copier, int rank, int size, size_t slot_bytes)
    : copier_(copier), rank_(rank), size_(size), slot_bytes_(slot_bytes) {
  auto shared = copier_.share_memory(2 * slot_bytes);
  if (!shared.ok()) {
    address_.why_not = absl::StrCat("rank ", rank, " could not share its window: ",
                                    shared.status().message());
    return;
  }
  own_ = shared->data;
  address_.handle = std::move(shared->handle);
}

void Context::release() {
  for (const Pair& p : pairs_) {
    if (p.peer() != rank_) copier_.release_shared(p.window());
  }
  pairs_.clear();
  if (own_ != nullptr) copier_.release_shared(own_);
  own_ = nullptr;
}

absl::Status Context::connect(const std::vector<Address>& addresses) {
  if (addresses.size() != static_cast<size_t>(size_)) {
    return absl::InternalError(absl::StrCat("cuda_ipc: ", addresses.size(), " addresses for ",
                                            size_, " ranks"));
  }
  pairs_.clear();
  for (int r = 0; r < size_; ++r) {
    const Address& a = addresses[r];
    if (a.handle.empty()) return absl::UnavailableError(a.why_not);
    if (r == rank_) {
      pairs_.emplace_back(r, own_, slot_bytes_);
      continue;
    }
    auto window = copier_.open_shared(a.handle, 2 * slot_bytes_);
    if (!window.ok()) {
      return absl::Status(window.status().code(),
                          absl::StrCat("rank ", rank_, " could not map rank ", r,
                                       "'s window: ", window.status().message()));
    }
    pairs_.emplace_back(r, *window, slot_bytes_);
  }
  return absl::OkStatus();
}

}  // namespace weft::transport::cuda_ipc
