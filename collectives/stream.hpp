// Building blocks every algorithm drives its links with: a Landing applies received bytes to
// memory a whole element at a time (copying or reducing), and a Waiter bounds every wait.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "collectives/reduce.hpp"
#include "src/base/deadline.hpp"
#include "transport/transport.hpp"

namespace weft {

/// The scratch a streamed reduce landing works through: small enough to stay in L1 or L2
/// between the reduction and the streaming copy, large enough that the per-block fence is
/// noise; a multiple of every element size.
inline constexpr size_t kStreamBlockBytes = 32 << 10;

/// Which operand of a reduction comes first. Most ops give the same bits either way, but
/// max and min keep the first of two equal operands (+0 and -0) and the first of two NaNs:
/// two ranks that each compute one result must agree on the order, or their bits differ
/// (collectives/reduce_kernels.hpp).
enum class Operands { kLocalFirst, kIncomingFirst };

/// Where a reduce landing also hands each finished stretch of its result, while the stretch
/// is still in the cache (the push allreduce writes it into the peer's output).
class ResultEcho {
 public:
  virtual ~ResultEcho() = default;
  /// `data` holds the result for bytes [offset, offset + len) of the landing's region.
  virtual void echo(size_t offset, const std::byte* data, size_t len) = 0;
};

/// Where received bytes go. In copy mode dst[i] = incoming[i]; in reduce mode
/// dst[i] = local[i] op incoming[i] (or incoming[i] op local[i]). Links split the stream
/// anywhere, so a partial element waits in a small carry until its last byte arrives.
class Landing {
 public:
  static Landing copy(std::byte* dst, size_t bytes);
  static Landing reduce(std::byte* dst, const std::byte* local, size_t bytes, ReduceFn fn,
                        size_t elem_bytes, Operands order = Operands::kLocalFirst);
  /// As reduce, for a destination far larger than the caches that nobody reads soon and that
  /// is not `local`: results are reduced a block at a time into `block` (kStreamBlockBytes,
  /// cache-resident) and streamed out (non-temporal stores), so dst's old lines are never
  /// read in. A null block makes it a plain reduce.
  static Landing reduce_streamed(std::byte* dst, const std::byte* local, size_t bytes,
                                 ReduceFn fn, size_t elem_bytes, std::byte* block,
                                 Operands order = Operands::kLocalFirst);
  Landing() = default;
  /// A reduce landing also hands every finished stretch of its result to `echo`.
  void echo_to(ResultEcho* echo) { echo_ = echo; }

  /// The transport Sink: takes the next `len` bytes of the region.
  void accept(const std::byte* data, size_t len);
  /// A copy landing lets the link write straight into its destination: where the next byte
  /// goes (null for a reduce landing), and then how many bytes the link wrote there.
  std::byte* direct_destination() const { return fn_ == nullptr ? dst_ + landed_ : nullptr; }
  void landed_directly(size_t len) { landed_ += len; }

  size_t bytes() const { return bytes_; }
  /// Bytes taken, including a partial element in the carry.
  size_t accepted() const { return landed_ + carry_len_; }
  /// Bytes whose final value is in dst.
  size_t landed() const { return landed_; }
  size_t wanted() const { return bytes_ - accepted(); }
  bool done() const { return landed_ == bytes_; }

 private:
  void apply(const std::byte* in, size_t len);  // whole elements only

  std::byte* dst_ = nullptr;
  const std::byte* local_ = nullptr;
  size_t bytes_ = 0;
  ReduceFn fn_ = nullptr;
  size_t elem_ = 1;
  std::byte* block_ = nullptr;  // set: results are streamed out through it
  bool incoming_first_ = false;
  ResultEcho* echo_ = nullptr;
  size_t landed_ = 0;
  std::byte carry_[8] = {};
  size_t carry_len_ = 0;
};

/// A local copy done in pieces while the links have nothing to do (a rank waiting for its
/// peer to read an offer has a core to spare), and finished at the end.
class IdleCopy {
 public:
  IdleCopy() = default;
  /// Nothing to do when dst == src. `output_bytes`: the call's whole output on this rank, of
  /// which the copy is part; it decides whether the copy streams past the caches (copy.hpp).
  IdleCopy(std::byte* dst, const std::byte* src, size_t bytes, size_t output_bytes);

  /// Copies the next piece, if any is left; returns whether it did.
  bool step();
  void finish();

 private:
  void copy(size_t n);  // the next n bytes

  std::byte* dst_ = nullptr;
  const std::byte* src_ = nullptr;
  size_t bytes_ = 0;
  size_t done_ = 0;
  bool stream_ = false;
};

/// Receives up to `landing.wanted()` bytes (at most `max`) from `pair` into `landing`.
absl::StatusOr<size_t> receive_into(transport::Pair& pair, Landing& landing,
                                    size_t max = static_cast<size_t>(-1));

/// What keeps every link of a communicator answering its peer while a wait naps (tcp:
/// acknowledgements, bytes sent again after a path failure), links the wait is not about
/// included. The communicator sets it for the thread that runs its call (TendingScope).
class LinkTending {
 public:
  virtual ~LinkTending() = default;
  /// Returns whether any link still has work outstanding.
  virtual bool tend_links() = 0;
};

/// Sets the calling thread's LinkTending for the scope's life.
class TendingScope {
 public:
  explicit TendingScope(LinkTending* tending);
  ~TendingScope();
  TendingScope(const TendingScope&) = delete;
  TendingScope& operator=(const TendingScope&) = delete;

 private:
  LinkTending* previous_;
};

/// Decides what to do when a pass over the links moved nothing: back off, check that the
/// peers live, and fail with a message naming the collective and the peers at the deadline.
class Waiter {
 public:
  Waiter(const char* what, Deadline deadline) : what_(what), deadline_(deadline) {}

  /// Call after every pass: `moved` says whether any byte moved. `a` and `b` are the links
  /// being waited on (either may be null).
  absl::Status after_pass(bool moved, transport::Pair* a, transport::Pair* b = nullptr);

  /// Process-wide, set by each communicator (WEFT_HEALTH_STALL_FRACTION of its timeout): a
  /// wait that sees no byte move for this long counts one stall against the links it waits
  /// on (Pair::note_stall), once per wait; the health monitor judges the count.
  static void set_stall_after(absl::Duration d);

 private:
  absl::Status stalled(transport::Pair* a, transport::Pair* b);
  /// While napping: notes a stall on `a` and `b` once the wait has lasted the stall time.
  void watch_for_stall(transport::Pair* a, transport::Pair* b);

  const char* what_;
  Deadline deadline_;
  Backoff backoff_;
  absl::Time idle_since_ = absl::InfinitePast();  // InfinitePast: moving, or not napping yet
  bool stall_noted_ = false;
};

}  // namespace weft
