// Call agreement: before any data moves, the ranks check that they all make the same call.
//
// A rank that calls allreduce while another calls allgather, or passes another count, type,
// op, root or algorithm, would otherwise hang or mix unrelated bytes into a result. Each rank
// starts from its own call's signature and merges what it hears into an agreement: the
// signature of the lowest rank, and the lowest rank whose signature differs from it. The
// merge is idempotent and order-free, and both partners of an exchange end it with the same
// agreement, so after the last round every rank holds the same one and a mismatch fails
// every rank with the same message naming both sides.
//
// The rounds follow recursive doubling on ring positions: with P the largest power of two
// <= N, the N-P extra positions hand their state to a partner among the first N-P, the first
// P exchange with the position at distance 1, 2, 4, ... (XOR), and partners hand the result
// back. Small-message algorithms that move data in that very pattern (allreduce, allgather
// and broadcast by recursive doubling, the barrier) carry the state in band, ahead of each
// round's data (AgreementRound), so the check costs them no extra round trip; every other
// algorithm runs the rounds on their own first (agree()). Because both use one pattern and
// one message, ranks that picked different algorithms still meet and agree. Once a round
// shows a mismatch, both partners skip that round's data and the rest carry states only.
//
// The direct allgather sends its state to every peer at once instead, and waits for one from
// each: it hears every rank without relays, but relays nothing (CallAgreement::direct). Ranks
// only run it together unless their calls differ; then a rank that ran the rounds and heard
// of a direct rank (every such rank does: each message carries the flag of every state
// merged into it) trades one more state over each link the rounds leave unused
// (trade_states_off_the_rounds). Every rank then has heard every rank's own state, directly
// or relayed, and reaches the same verdict.
//
// The check also carries the route: a rank at one end of a link that its health judged bad
// (or that served its isolation) proposes a RouteChange, the merge keeps the least of those
// proposed, and every rank adopts it at the end of the call (src/isolation.hpp). Ranks thus
// change their schedule at the same call, without a round of its own; two proposals in one
// call take two calls.
//
// Wire format (integers little-endian), 24 bytes while the ranks agree and nobody proposes a
// route change, up to 55:
//   u8 magic 'W'  u8 version << 3 | 4 when a route change follows | 2 when direct
//                                  | 1 when a differing rank follows
//   u32 reference rank  reference signature (18 bytes)
//   [u32 differing rank  differing signature (18 bytes)]
//   [u8 action  u32 a  u32 b]  (RouteChange)
// A signature: u16 sequence number, u64 count, u8 collective, u8 type, u8 op, u8 algorithm
// (registry index), i32 root (-1 unless broadcast). Only the sequence number's low 16 bits
// travel: ranks are never more than a call apart, and the receiver restores the rest from
// its own. Small enough that 32 bytes of data ride with the state in one 56-byte
// shared-memory cell (2-rank allgather of 64 bytes, allreduce of 32).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/collective.hpp"
#include "collectives/stream.hpp"
#include "weft/types.hpp"

namespace weft {

/// What must be equal on every rank for one call. Fields a collective ignores are zero, so
/// that e.g. the op passed to an allgather cannot cause a mismatch.
struct CallSignature {
  uint32_t sequence = 0;  ///< calls made on this communicator before this one
  uint64_t count = 0;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint8_t algorithm = 0;  ///< index in all_algorithms()
  int32_t root = -1;

  /// The signature of `args` run with all_algorithms()[algorithm].
  static CallSignature of(uint32_t sequence, const CollectiveArgs& args, uint8_t algorithm);
  bool operator==(const CallSignature&) const = default;
  /// "call #12: allreduce of 1024 float, sum (ring)".
  std::string describe() const;
};

/// A change to the links every rank may use, proposed by a rank at one end: a link between
/// two ranks, or one rail (tcp interface, in WEFT_SOCKET_IFNAME order) of a rank's links.
struct RouteChange {
  /// Isolations sort first: of two proposals in one call, an isolation wins.
  enum Action : uint8_t { kIsolateLink = 1, kIsolateRail = 2, kRestoreLink = 3, kRestoreRail = 4 };
  /// The most rails a rank has (a link's paths are numbered in a 32-bit mask).
  static constexpr uint32_t kMaxRails = 32;
  Action action = kIsolateLink;
  uint32_t a = 0;  ///< a link: its lower rank; a rail: the rank whose rail it is
  uint32_t b = 0;  ///< a link: its higher rank; a rail: the rail's number

  static RouteChange link(Action action, int x, int y) {
    return {action, static_cast<uint32_t>(std::min(x, y)), static_cast<uint32_t>(std::max(x, y))};
  }
  bool isolates() const { return action == kIsolateLink || action == kIsolateRail; }
  bool on_rail() const { return action == kIsolateRail || action == kRestoreRail; }
  /// Whether it is well formed on `nranks` ranks.
  bool valid(int nranks) const;
  auto operator<=>(const RouteChange&) const = default;
  std::string describe() const;  ///< "isolate link 1-2", "restore rail 1 of rank 2"
};

/// What one rank knows about the ranks it has heard from.
struct CallAgreement {
  static constexpr uint32_t kNoRank = 0xffffffffu;
  static constexpr size_t kHeadBytes = 24;       ///< all of it while no rank differs
  static constexpr size_t kDifferingBytes = 22;  ///< a differing rank and its signature
  static constexpr size_t kRouteBytes = 9;       ///< a route change
  static constexpr size_t kWireBytes = kHeadBytes + kDifferingBytes + kRouteBytes;  ///< the most

  uint32_t reference_rank = 0;
  CallSignature reference;
  uint32_t differing_rank = kNoRank;
  CallSignature differing;
  /// A rank of the direct exchange sent a state merged here: it relayed nobody's but its own.
  bool direct = false;
  /// The least route change any merged state proposed; every rank adopts it after the call.
  std::optional<RouteChange> route;

  void merge(const CallAgreement& other);
  /// Writes kHeadBytes to kWireBytes bytes and returns how many.
  size_t encode(std::byte* out) const;
  /// How many bytes the message whose first kHeadBytes are `head` takes in all.
  static size_t wire_bytes(const std::byte* head);
  /// Bounds-checks everything: the length, ranks below `nranks`, known enumerators, a known
  /// algorithm. Sequence numbers are restored as the ones nearest `near_sequence` (ours).
  static absl::StatusOr<CallAgreement> decode(const std::byte* in, size_t len, int nranks,
                                              uint32_t near_sequence = 0);
  /// OK when no rank differs; otherwise the InvalidArgument every rank returns.
  absl::Status verdict() const {
    return differing_rank == kNoRank ? absl::OkStatus() : mismatch();
  }

 private:
  absl::Status mismatch() const;
};

/// Whether the call check's rounds (agree(), and the algorithms that carry them) link ring
/// positions p and q of n: below the largest power of two, positions one bit apart; above
/// it, each extra with the position that power of two below it. Each such link carries one
/// state each way; the rest carry none unless a direct exchange took part.
inline bool rounds_link(int p, int q, int n) {
  const int pow2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int d = p ^ q;
  return p < pow2 && q < pow2 ? std::has_single_bit(static_cast<unsigned>(d)) : d == pow2;
}

/// The ring positions that position p of n reaches off the rounds' links, by XOR distance:
/// the order in which both a direct exchange and trade_states_off_the_rounds ask for those
/// links, the same on every rank. Writes them to `out` (room for n - 1); returns the count.
inline int positions_off_the_rounds(int p, int n, int* out) {
  int k = 0;
  for (int d = 1; d < 2 * n; ++d) {
    if ((p ^ d) < n && !rounds_link(p, p ^ d, n)) out[k++] = p ^ d;
  }
  return k;
}

/// Runs the agreement rounds on their own, merging into `known` (which starts as this rank's
/// own signature); afterwards known.verdict() is the same on every rank.
absl::Status agree(const AlgoContext& ctx, CallAgreement& known, Deadline deadline);

/// For a rank that ran the rounds (agree() or an algorithm that carries them) when `known`
/// says a direct rank took part: one state each way over every link the rounds leave unused,
/// merged into `known`. Ranks of the direct exchange read one from every peer.
absl::Status trade_states_off_the_rounds(const AlgoContext& ctx, CallAgreement& known,
                                         Deadline deadline);

/// One round's state in band: ours goes out ahead of the round's data and the partner's is
/// read ahead of its data, then merged. Data follows only while no mismatch is known.
class AgreementRound {
 public:
  /// Snapshots `known` to send; merges the partner's state into it on arrival.
  AgreementRound(CallAgreement& known, int nranks);

  /// Up to this many bytes of the round's data can ride in the same send as the state: with
  /// the state, 2 KiB, as much as Pair::send_gathered joins. Past the four cells an shm write
  /// holds inline they go as one bulk stretch, still one write and one read instead of two
  /// each (2-rank allgather of 512 B: 1812 -> 1652 instructions per call; copying them
  /// through here costs less than that). 2 KiB rather than 512 with the state: a 2-rank
  /// 1 KiB allreduce over ucx 3,597 -> 3,212 instructions a call, 512 B 3,398 -> 2,992.
  static constexpr size_t kCarryBytes = 2048 - CallAgreement::kHeadBytes;
  static_assert(CallAgreement::kHeadBytes + kCarryBytes <= transport::Pair::kGatherBytes);
  /// Appends a small payload to our state (calls add up to at most kCarryBytes): both leave in
  /// one send, so a small message costs the link one write. The payload is copied now.
  void carry(const std::byte* data, size_t len);
  /// As carry, for one payload (nothing carried before it) that stays unchanged where it is
  /// until sent(): from kInPlaceFrom bytes on it leaves from there, in the same send as the
  /// state, instead of being copied here first (2-rank allgather of 512 B: 1646 -> 1584
  /// instructions per call, 1-2% faster). A shorter one is copied: with the state it fits
  /// the shm cells, and filling a cell from two places costs more than the copy (64 and
  /// 256 B: 100 instructions more).
  static constexpr size_t kInPlaceFrom = 201;  // 200 B + the state: shm's four inline cells
  void carry_in_place(const std::byte* data, size_t len);

  /// Read straight to where they land, more than kCarryBytes may come with the state: a
  /// partner's block up to this many bytes that follows its state in the stream (sent with
  /// send_some_more) is read with it, one receive instead of two.
  static constexpr size_t kReadWithStateUpTo = size_t{8} << 10;
  /// The partner carries `len` bytes after its state when the calls agree, as we would in its
  /// place: receive() then asks for them (up to kCarryBytes, or kReadWithStateUpTo with
  /// `into`) together with the state, so a small message usually takes one read. Only for
  /// rounds after which the partner sends us nothing more in this call: should the calls
  /// differ, whatever was read past the state is dropped with the call. `into`, when not
  /// null, is where those bytes belong in the end (a plain copy's destination): they are read
  /// straight there rather than through this round's buffer, so on a mismatch it holds the
  /// partner's bytes of a call that fails.
  void expect_carried(size_t len, std::byte* into = nullptr) {
    expected_ = std::min(len, into != nullptr ? kReadWithStateUpTo : kCarryBytes);
    carried_to_ = expected_ > 0 ? into : nullptr;
  }
  /// The round's data, once merged() and data_follows(): up to `max` bytes into `landing`,
  /// first those receive() read past the state, then on from `pair`. Returns how many.
  absl::StatusOr<size_t> receive_data(transport::Pair& pair, Landing& landing,
                                      size_t max = SIZE_MAX);

  /// Move what is left of our state out / the partner's state in; return the bytes moved.
  /// `data_next`: the caller sends this round's data right after, which may then share the
  /// state's packet (Pair::send_some_more).
  absl::StatusOr<size_t> send(transport::Pair& pair, bool data_next = false);
  absl::StatusOr<size_t> receive(transport::Pair& pair);

  bool sent() const { return sent_ == out_len_ + in_place_len_; }
  bool merged() const { return merged_; }
  /// Whether this round's data moves: not once a mismatch is known (both partners then know).
  bool data_follows() const { return known_.differing_rank == CallAgreement::kNoRank; }
  /// Sending this round's data over `pair` failed with `error`. A partner that knows the
  /// calls differ drops our data, finishes and closes the link, but the state it sent first
  /// is still there to read: if it says the calls differ, returns OK (the verdict names the
  /// mismatch on every rank), else `error`.
  absl::Status unless_calls_differ(transport::Pair& pair, absl::Status error);

 private:
  bool agrees_with_ours() const;

  CallAgreement& known_;
  int nranks_;
  std::byte out_[CallAgreement::kWireBytes + kCarryBytes];
  std::byte in_[CallAgreement::kWireBytes + kCarryBytes];
  size_t out_len_ = 0;
  size_t state_len_ = 0;                 // of our state, at the start of out_
  const std::byte* in_place_ = nullptr;  // see carry_in_place: sent after out_
  size_t in_place_len_ = 0;
  size_t sent_ = 0;
  size_t got_ = 0;
  size_t in_len_ = CallAgreement::kHeadBytes;  // until the head says more follows
  size_t expected_ = 0;                        // carried bytes asked for with the head
  size_t landed_ = 0;                          // of those read past the state, handed on
  std::byte* carried_to_ = nullptr;            // see expect_carried
  size_t direct_ = 0;  // carried bytes read to carried_to_, not yet handed to the landing
  bool merged_ = false;
};

/// Moves `round`'s state out over `to` and the partner's in over `from` (either may be null);
/// `data_next` as for AgreementRound::send.
absl::Status state_round(transport::Pair* to, transport::Pair* from, AgreementRound& round,
                         Waiter& waiter, bool data_next = false);

}  // namespace weft
