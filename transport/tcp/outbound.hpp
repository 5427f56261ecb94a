// The sending half of a tcp link. The caller's bytes are copied into a retention ring before
// they leave, cut into frames (frame.hpp) and striped over the rails' data sockets by stream
// offset (kStripeBytes per rail in turn). The ring keeps every byte until the receiver
// acknowledges it (in the headers of its own data frames, or on the rails' control sockets),
// so when a rail fails, or the receiver asks again (a CRC32C mismatch, a rail it lost), the
// sender starts a new epoch over the rails left and sends again from the last acknowledged
// byte; the receiver skips what it already has. The caller never notices: a byte counts as
// taken once it is in the kernel, as before, or held in the ring for the send that follows
// (MSG_MORE).
//
// Bytes lent (lend(): the caller leaves them unchanged until its call ends) are not copied:
// the ring's place for them stays empty, they are sent and sent again from where they lie,
// and when the call ends what of them is still unacknowledged is copied into that place
// (call_ends()). A large call copies the last few hundred KiB instead of every byte. Frames
// of lent bytes say so, their receiver acknowledges them when its call has received all
// (Inbound::call_received), and call_ends waits for that acknowledgement up to what the copy
// would take before it copies.
#pragma once

#include <cstddef>
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/tcp/link_events.hpp"
#include "transport/tcp/path.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

/// Bytes each outbound direction of a link retains until acknowledged, per rail (a path of
/// the link: WEFT_SOCKETS_PER_RAIL makes more), up to kMaxRetainBytes: the window a path
/// failure can cost, and the most a sender has in flight. 1 MiB a rail and not more: every
/// byte that is not lent is copied into the ring, and a ring that fits in a core's L2 cache
/// beside the caller's buffers made 32 KiB-512 KiB allreduces over tcp 10-25% faster than a
/// 4 MiB one (docs/PERFORMANCE.md), while large messages were not slower. More rails keep
/// more in flight, two stripe chunks each, up to the 4 MiB a link had before.
inline constexpr size_t kRetainBytesPerRail = 1 << 20;
inline constexpr size_t kMaxRetainBytes = 4 << 20;
/// The window of a link over `rails` rails: a power of two, so ring places are offsets masked.
constexpr size_t retain_bytes(size_t rails) {
  size_t bytes = kRetainBytesPerRail;
  while (bytes < kRetainBytesPerRail * rails && bytes < kMaxRetainBytes) bytes *= 2;
  return bytes;
}
/// The receiver acknowledges on the control socket what no data frame of its own carried,
/// every quarter window, and everything every half window whatever rode on data: a riding
/// acknowledgement reaches the sender only when it reads from this end, which a sender
/// waiting for room may not be doing.
constexpr size_t ack_every_bytes(size_t rails) { return retain_bytes(rails) / 4; }
constexpr size_t ack_all_every_bytes(size_t rails) { return retain_bytes(rails) / 2; }
/// Lent bytes from this many on are worth a wait for their acknowledgement at the call's
/// end (the receiver sends it then, Inbound::call_received) rather than a copy.
inline constexpr size_t kAckLentFrom = 64 << 10;
/// The largest checksummed frame: the receiver holds a whole one before handing a byte over.
inline constexpr size_t kChecksumFrameBytes = 64 << 10;

class Outbound {
 public:
  /// Each rail's data and control socket, in the order both ends number them; the pair owns
  /// them and `events`.
  Outbound(std::vector<Path*> data, std::vector<Path*> control, bool checksum,
           const LinkFaults& faults, LinkEvents* events, RidingAcks* acks);

  /// Takes up to `len` bytes of the stream; returns how many are now in a kernel's hands, or
  /// with `flags` MSG_MORE held in the ring to leave in one frame with the next send's.
  absl::StatusOr<size_t> send(const std::byte* data, size_t len, int flags);
  /// As send, for bytes the caller leaves unchanged until call_ends() (Pair::lend_some).
  absl::StatusOr<size_t> lend(const std::byte* data, size_t len, int flags);
  /// The caller's call ends: what is still unacknowledged of the bytes it lent is copied into
  /// the ring (after a wait for the acknowledgement when that is much), and nothing is read
  /// from where they lay from now on.
  void call_ends();
  /// Reads acknowledgements and resend requests, and sends again what a resumption owes,
  /// while the caller waits elsewhere; an error once no path is left.
  absl::Status tend();
  /// Whether bytes the caller has handed over still wait to be sent (again, after a
  /// resumption, or on from a full socket): tend() sends them. Bytes held for the send that
  /// follows (MSG_MORE) are not owed yet.
  bool owes() const { return (wire_ < taken_ && !held_) || cur_.orphan; }
  /// Whether bytes wait in the ring for the send that follows (MSG_MORE).
  bool holds() const { return held_; }
  /// Sends bytes held for a send that has not come (the caller waits instead).
  void send_held() {
    if (held_) push(0);
  }
  /// Whether sent bytes await acknowledgement: until then a resend request may come.
  bool unacknowledged() const { return acked_ < std::max(wire_, taken_); }
  /// A socket of rail `path` reported an error or hang-up (check_peer's poll).
  void lost(size_t path, std::string cause);
  /// Takes rail `path` out of use for data (its sockets stay open) or back, from the next
  /// frame on: a new epoch from the last byte sent. Never takes out the last usable rail.
  void set_in_use(size_t path, bool in_use, bool announce = true);

  const absl::Status& failed() const { return failed_; }
  /// From now on, losing the last path leaves the half stranded (holding its bytes, sending
  /// nothing) rather than failed, until add_path() or fail().
  void allow_stranding() { may_strand_ = true; }
  bool stranded() const { return failed_.ok() && live_.empty(); }
  /// A path added to the live link (a relay path): a new epoch over the paths alive, from
  /// the last acknowledged byte. The pair owns the sockets.
  void add_path(Path* data, Path* control, const std::string& why);
  /// Carries the stream over the added paths alone (`on`; the direct rails stay open but carry
  /// no new frame) or over the direct rails again, each set only while one of its paths is
  /// alive. Switching starts a new epoch from the last acknowledged byte: on a lossy rail the
  /// bytes already in its socket may wait out tcp's retransmission timeouts.
  void detour(bool on);
  bool detoured() const { return detour_; }
  /// Ends the half with `status` (a stranded link that got no path in time).
  void fail(absl::Status status) { failed_ = std::move(status); }
  /// For each path, the socket whose failure ended it for sending.
  std::vector<Path*> why_rails_failed() const;

 private:
  struct Current {
    bool active = false;
    bool orphan = false;  ///< of an earlier epoch, finished only to keep its socket in step
    size_t path = 0;
    std::byte header[kFrameHeaderBytes];
    size_t sent = 0;  ///< bytes of header and payload on the wire
    uint64_t start = 0;
    uint64_t end = 0;
    uint64_t ack = 0;  ///< what its header acknowledges (RidingAcks::carried once written)
  };

  absl::StatusOr<size_t> take(const std::byte* data, size_t len, int flags,
                              bool keep_where_it_lies);
  void stage(const std::byte* data, size_t len);
  /// Copies `len` bytes to the ring's places for stream offsets [offset, offset + len).
  void put_in_ring(uint64_t offset, const std::byte* data, size_t len);
  /// As stage, for lent bytes: they are recorded where they lie, up to the window.
  void stage_lent(const std::byte* data, size_t len);
  /// Where the stream's bytes from `offset` lie, and how many lie there contiguously (at most
  /// `max`): in a lent span or in the ring.
  std::pair<const std::byte*, size_t> bytes_at(uint64_t offset, size_t max) const;
  /// How many bytes from `offset` on lie alike (all in one lent span, or all in the ring, up
  /// to the next span): a frame holds at most two such runs (start_frame).
  uint64_t run_at(uint64_t offset) const;
  /// Forgets spans wholly acknowledged, which no frame still reads.
  void drop_acked_spans();
  void push(int flags);
  void start_frame();
  /// One write of the current frame, sending no payload at `stop` or beyond; false when its
  /// socket is full or failed, or `stop` is reached.
  bool write_current(int flags, uint64_t stop);
  /// Reads what the control sockets hold, or until everything before `enough` is acknowledged.
  void read_control(size_t path, uint64_t enough = UINT64_MAX);
  void read_all_control(uint64_t enough = UINT64_MAX);
  /// Takes in what the peer's data frames acknowledged (the receiving half read them).
  void absorb_riding_acks() { acked_ = std::max(acked_, std::min(acks_->peer_consumed, staged_)); }
  /// The first stream byte the link still needs: the last acknowledged one, or an earlier
  /// one that the frame under way still sends (after a resumption from an older byte, or an
  /// orphan's): the ring's places and the lent spans from there on are kept.
  uint64_t kept_from() const { return cur_.active ? std::min(acked_, cur_.start) : acked_; }
  /// The stream offset staging stops before: the ring holds one window from kept_from().
  uint64_t window_end() const { return kept_from() + retain_bytes_; }
  /// Resumes without a rail the receiving half found dead (the twins share sockets).
  void notice_deaths();
  void control_lost(size_t path, std::string cause);
  /// Whether rail `path` can carry data: both its sockets live, it is in use, and it is of
  /// the set the detour prefers (or that set has no live path).
  bool usable(size_t path) const;
  /// `quiet`: counted, not logged (a rail change nobody needs to hear of).
  void restart(uint64_t from, const std::string& why, bool quiet = false);
  size_t path_for(uint64_t offset) const;
  std::string live_names() const;

  std::vector<Path*> paths_;    ///< each rail's data socket
  std::vector<Path*> control_;  ///< each rail's control socket: acknowledgements come here
  const bool checksum_;
  LinkFaults faults_;
  LinkEvents* events_;
  RidingAcks* acks_;
  const size_t retain_bytes_;  ///< retain_bytes(rails): the window, and the ring's size
  std::unique_ptr<std::byte[]> ring_;
  // Lent spans, in stream order: stream bytes [start, end) lie at `at`. Their places in the
  // ring stay empty until call_ends(). A link full of spans copies instead.
  struct Lent {
    uint64_t start, end;
    const std::byte* at;
  };
  static constexpr size_t kMaxLent = 32;
  std::array<Lent, kMaxLent> lent_{};
  size_t lent_first_ = 0, lent_count_ = 0;
  const Lent& lent(size_t i) const { return lent_[(lent_first_ + i) % kMaxLent]; }
  // Stream offsets: acked_ <= wire_ <= staged_, taken_ <= staged_.
  uint64_t acked_ = 0;   ///< the receiver has consumed everything before
  uint64_t wire_ = 0;    ///< the current epoch has sent everything before
  uint64_t staged_ = 0;  ///< the ring holds [acked_, staged_)
  uint64_t taken_ = 0;   ///< reported taken to the caller
  uint64_t sent_end_ = 0;  ///< the furthest any epoch has sent: resent bytes are below it
  bool held_ = false;    ///< [wire_, taken_) waits for the next send (MSG_MORE)
  uint64_t flagged_end_ = 0;  ///< where the last frame marked lent ends: its ack will come
  uint32_t epoch_ = 0;
  uint64_t epoch_start_ = 0;
  std::vector<size_t> live_;  ///< the epoch's paths, in order
  Current cur_;
  uint64_t calls_ = 0;
  uint32_t out_of_use_ = 0;       ///< rails taken out of use, by bit
  uint32_t want_out_of_use_ = 0;  ///< as set_in_use asked: applied between frames
  bool announce_use_ = true;      ///< whether that change is logged (set_in_use's announce)
  /// Applies want_out_of_use_ unless a frame is half sent: a frame left half sent on a rail
  /// the receiver no longer reads could never be finished once its socket fills.
  void apply_use();
  bool may_strand_ = false;
  const size_t direct_;   ///< paths [0, direct_) are the rails; later ones were added
  bool detour_ = false;   ///< as detour() asked
  absl::Status failed_;
};

}  // namespace weft::transport::tcp
