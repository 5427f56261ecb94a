// UCX requests a link has under way, oldest first, each with a mark: what is free once it
// completes (the end of a send ring's run, the end of an offered stretch). A link keeps two
// such queues, for its copied sends and for the messages of an offer (pair.hpp).
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <cstddef>

namespace weft::transport::ucx {

template <typename Mark, size_t N>
class RequestQueue {
 public:
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == N; }
  size_t size() const { return count_; }

  /// Queues `request` (null: UCX finished it when posted). One finished with none before it
  /// is done at once: `done(mark)`.
  template <typename Done>
  void add(void* request, Mark mark, Done done) {
    if (request == nullptr && count_ == 0) return done(mark);
    slots_[(first_ + count_++) % N] = {request, mark};
  }

  /// Frees the completed requests, oldest first, handing each one's mark to `done`; stops at
  /// the first still under way. A failed one is freed and its status returned; it counts as
  /// done at the next reap.
  template <typename Done>
  ucs_status_t reap(Done done) {
    while (count_ > 0) {
      Slot& s = slots_[first_];
      if (s.request != nullptr) {
        const ucs_status_t status = ucp_request_check_status(s.request);
        if (status == UCS_INPROGRESS) break;
        ucp_request_free(s.request);
        s.request = nullptr;
        if (status != UCS_OK) return status;
      }
      done(s.mark);
      first_ = (first_ + 1) % N;
      --count_;
    }
    return UCS_OK;
  }

  /// Whether a request UCX has not finished is still queued.
  bool under_way() const {
    for (size_t i = 0; i < count_; ++i) {
      void* r = slots_[(first_ + i) % N].request;
      if (r != nullptr && ucp_request_check_status(r) == UCS_INPROGRESS) return true;
    }
    return false;
  }

  /// Cancels and frees every request, before the buffers they point into go.
  void cancel_all(ucp_worker_h worker) {
    for (; count_ > 0; --count_, first_ = (first_ + 1) % N) {
      void* r = slots_[first_].request;
      if (r == nullptr) continue;
      if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker, r);
      ucp_request_free(r);
    }
  }

 private:
  struct Slot {
    void* request;
    Mark mark;
  };
  std::array<Slot, N> slots_{};
  size_t first_ = 0, count_ = 0;
};

}  // namespace weft::transport::ucx
