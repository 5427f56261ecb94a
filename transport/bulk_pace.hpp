// Whether large copies into a peer's memory are worth making, judged by timing them.
//
// Between processes of one host a large message can cross two ways: the sender copies it
// into memory the peer maps (a ring) and the peer copies it out, or the peer reads it in
// one copy straight from the sender's buffer (CMA, which UCX's rendezvous uses on one
// host). Writing into the peer's ring first takes each line from the peer's cache. Where
// the two cores share a last-level cache that is cheap: a 256 KiB packet went into a ucx
// mailbox at 41-43 GB/s, and two copies beat the rendezvous's round trip up to 256 KiB.
// Where they do not (other dies or sockets; this project's 2-core VM is placed so now and
// then, for minutes at a time) the same write ran at 2.4 GB/s, and a 2-rank 512 KiB
// allgather took 150 us against Open MPI's 31 us, whose UCX reads such a message in one
// copy into the reader's own buffer. Neither placement can be read off the topology the
// guest sees.
//
// So a link times its large copies into the peer's memory. While they run slow, messages of
// that size go in one copy instead, and one every kRetryAfterNs goes the copying way again,
// to learn whether the placement changed (the slow write it costs is about 1% of that
// time).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace weft::transport {

class BulkPace {
 public:
  /// Copies from this size are timed, one in kTimeEvery: two clock reads cost 50 ns here,
  /// 2-3% of a 64 KiB copy.
  static constexpr size_t kTimedFrom = size_t{64} << 10;
  static constexpr uint32_t kTimeEvery = 4;
  /// Copies slower than this are slow: 41-43 GB/s near, 2.4 GB/s far (above).
  static constexpr double kSlowBelowBytesPerNs = 8;
  static constexpr int64_t kRetryAfterNs = 10'000'000;

  /// Whether a message of `len` bytes should be copied into the peer's memory now: always
  /// below kTimedFrom; above, while such copies run fast, or once a kRetryAfterNs while slow.
  bool worth(size_t len) const {
    return len < kTimedFrom || !slow_ || now_ns() - timed_at_ >= kRetryAfterNs;
  }
  /// Whether a message of `len` bytes had better be read by the peer in one copy: copies of
  /// its size into the peer's memory run slow.
  bool single_copy(size_t len) const { return len >= kTimedFrom && slow_; }

  /// Makes `copy()`, which copies `len` bytes into the peer's memory, timing one large copy
  /// in kTimeEvery while they run fast, and every one (each a retry) while slow.
  template <typename Copy>
  void copy(size_t len, Copy&& copy) {
    if (len < kTimedFrom || (!slow_ && ++untimed_ < kTimeEvery)) return copy();
    untimed_ = 0;
    const int64_t start = now_ns();
    copy();
    const int64_t end = now_ns();
    timed(len, end - start, end);
  }
  /// A copy of `len` bytes took `ns`, ending at `now_ns`. Two slow copies timed in a row
  /// make copies slow (one alone may have been interrupted); one fast copy makes them fast.
  void timed(size_t len, int64_t ns, int64_t now_ns) {
    const bool slow_now =
        static_cast<double>(len) < kSlowBelowBytesPerNs * static_cast<double>(ns);
    slow_ = slow_now && (slow_ || last_slow_);
    last_slow_ = slow_now;
    timed_at_ = now_ns;
  }
  bool slow() const { return slow_; }

  /// A fine monotonic clock (deadlines use a coarse one).
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  bool slow_ = false;
  bool last_slow_ = false;
  int64_t timed_at_ = 0;
  uint32_t untimed_ = 0;  // large copies since the last one timed
};

}  // namespace weft::transport
