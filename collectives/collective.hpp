// What an algorithm is given: the call's arguments, the ring schedule, the links it may open
// and the communicator's preallocated workspace. Algorithms never learn which transport a
// link uses.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/reduce.hpp"
#include "src/base/deadline.hpp"
#include "transport/transport.hpp"
#include "weft/types.hpp"

namespace weft {

/// Only allreduce and reduce_scatter reduce; the others ignore the op.
constexpr bool reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduceScatter;
}

/// Whether `count` is one rank's block (allgather's send, reduce_scatter's receive): one of
/// the call's buffers then holds a block per rank.
constexpr bool counts_per_rank(CollectiveKind kind) {
  return kind == CollectiveKind::kAllgather || kind == CollectiveKind::kReduceScatter;
}

/// One collective call, validated. `count` is in elements: the whole vector for allreduce
/// and broadcast, the per-rank block for allgather (send) and reduce_scatter (receive).
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kAllreduce;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  Deadline deadline = Deadline::never();
  /// Only the call check runs (collectives/call_check.hpp), no data moves: once it returns
  /// every rank has entered the call. The cuda_ipc path (src/ipc_path.hpp) orders its pieces
  /// with it while the data moves GPU to GPU.
  bool agree_only = false;

  size_t elem_bytes() const { return size_of(type); }
};

/// The order in which ranks pass data around. The router builds it; a router that moves
/// traffic off a bad link hands out a different ring for a later epoch.
class Schedule {
 public:
  Schedule() = default;
  /// `ring`: ranks in ring order, every rank of 0..size-1 exactly once.
  Schedule(uint64_t epoch, std::vector<int> ring);

  uint64_t epoch() const { return epoch_; }
  const std::vector<int>& ring() const { return ring_; }
  int position_of(int rank) const { return position_[rank]; }
  int rank_at(int position) const;  ///< position taken modulo the ring size

 private:
  uint64_t epoch_ = 0;
  std::vector<int> ring_;
  std::vector<int> position_;  // inverse of ring_: looked up on every call
};

/// Opens links on first use (a rank connects only to the peers its schedules use).
class LinkProvider {
 public:
  virtual ~LinkProvider() = default;
  virtual absl::StatusOr<transport::Pair*> link(int peer, Deadline deadline) = 0;
};

/// A bounded FIFO of bytes, allocated and touched once per communicator: it carries partial
/// reductions from one link to the next without a buffer the size of the message.
struct Relay {
  std::byte* data = nullptr;
  size_t capacity = 0;  ///< a multiple of 8, so an element never straddles the wrap
};

struct CallAgreement;   // collectives/call_check.hpp
class DirectExchange;  // collectives/direct_exchange.hpp

struct AlgoContext {
  int rank = 0;
  int size = 1;
  const Schedule* schedule = nullptr;
  LinkProvider* links = nullptr;
  Relay relay;
  /// kStreamBlockBytes of scratch for streamed reduce landings (collectives/stream.hpp);
  /// null: results are written in place through the caches.
  std::byte* stream_block = nullptr;
  /// For algorithms that carry the call check in band (Algorithm::carries_agreement): this
  /// rank's agreement so far, to send ahead of each round's data and merge into.
  CallAgreement* agreement = nullptr;
  /// The direct exchange's state, kept by the communicator rather than on each call's stack:
  /// its 15 rounds take about 64 KiB, and on the stack they made a 4-rank 8-byte allreduce
  /// with ranks sharing 2 cores take ~8 us instead of ~5.
  DirectExchange* direct = nullptr;
};

}  // namespace weft
