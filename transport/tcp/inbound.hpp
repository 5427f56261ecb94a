// The receiving half of a tcp link. It reads frames (frame.hpp) from the rails' data sockets
// in the order their headers say (each names the rail of the next), hands over the bytes at
// the stream offset it expects next and skips what it already has: frames of an epoch the
// sender has left behind, and bytes sent again. What it consumed rides on the data frames
// this end sends (RidingAcks, frame.hpp); on the rails' control sockets it acknowledges what
// no frame carried every ack_every_bytes(), everything every ack_all_every_bytes(),
// everything whenever the caller waits, and lent frames when its call has received them
// all (call_received); there too it asks the sender to resume when a rail
// fails or a checksum does not match, and until the sender's next epoch arrives it drops
// everything older.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/tcp/link_events.hpp"
#include "transport/tcp/path.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

class Inbound {
 public:
  /// Each rail's data and control socket, as Outbound takes them.
  Inbound(std::vector<Path*> data, std::vector<Path*> control, const LinkFaults& faults,
          LinkEvents* events, RidingAcks* acks);

  /// Up to `max` bytes, to where `to` says (not null) or through `sink`.
  absl::StatusOr<size_t> receive(size_t max, const Scatter* to, const Sink* sink);
  /// The caller's call received its last byte: what it consumed that no frame of this end
  /// carried back is acknowledged now if the sender waits for it (frames marked lent).
  void call_received();
  /// Sends what is owed (an acknowledgement, a resend request) while the caller waits.
  absl::Status tend();
  /// A socket of rail `path` reported an error or hang-up (check_peer's poll).
  void lost(size_t path, std::string cause);

  const absl::Status& failed() const { return failed_; }
  /// As Outbound's: losing the last path strands the half rather than failing it.
  void allow_stranding() { may_strand_ = true; }
  bool stranded() const;
  /// A path added to the live link: read from it too, and ask the sender to resume there
  /// from the next byte this half needs.
  void add_path(Path* data, Path* control);
  void fail(absl::Status status) { failed_ = std::move(status); }
  /// Whether an acknowledgement or a resend request is still to be sent.
  bool owes() const { return next_ != acked_ || resend_owed_; }
  /// The sender may stripe over other rails from its next frame on (Outbound::set_in_use):
  /// the next frame may come on any of them.
  void rails_changed() { scanning_ = true; }
  /// Sets the corruption rate from another thread (scripts/inject); the next receive uses it.
  void inject_corruption(double rate) { injected_rate_.store(rate, std::memory_order_relaxed); }

 private:
  struct Head {
    std::optional<Frame> frame;
    uint32_t used = 0;  ///< payload bytes of the frame read so far
    /// Its payload lies whole in checked_ and matched its CRC. Kept with the frame, so that
    /// a frame dropped or replaced on the path (a stale one, after a resend request) can never
    /// pass the next one's bytes off as checked.
    bool verified = false;
  };

  /// The path whose head frame holds the next byte, reading headers and dropping stale
  /// frames on the way; nullopt when none holds it yet.
  std::optional<size_t> find_next();
  /// Reads the head header of `path` if none is held; false when none is there yet.
  bool have_head(size_t path);
  bool stale(const Head& h) const;
  /// Drops what is there of `path`'s head frame's payload; true once it is all dropped.
  bool drop_payload(size_t path);
  /// Reads a checksummed frame whole and checks it; true once it may be handed over.
  bool verify(size_t path);
  /// Drops everything of the epochs seen so far and owes the sender a resend request from
  /// the next byte (sent on every live path by flush_control).
  void ask_resend();
  void send_control(const Frame& f, size_t path);
  void flush_control();
  void maybe_ack(size_t path);
  /// Acknowledges everything consumed on control socket `path` (if it lives), once what waits
  /// there is sent.
  void acknowledge_on(size_t path);
  void corrupt(std::byte* data, size_t len);
  void frame_done(size_t path);
  /// Asks for a resend after a rail the sending half found dead (the twins share sockets).
  void notice_deaths();

  std::vector<Path*> paths_;    ///< each rail's data socket
  const size_t direct_;         ///< paths [0, direct_) are the rails; later ones were added
  const size_t ack_every_;      ///< ack_every_bytes(direct_)
  const size_t ack_all_every_;  ///< ack_all_every_bytes(direct_)
  std::vector<Path*> control_;  ///< each rail's control socket: acknowledgements go here
  LinkEvents* events_;
  RidingAcks* acks_;
  std::vector<Head> heads_;
  std::unique_ptr<std::byte[]> staging_;  ///< kStagingBytes: sink reads and drops
  std::unique_ptr<std::byte[]> checked_;  ///< kChecksumFrameBytes: a frame being verified
  uint64_t next_ = 0;          ///< the stream offset handed over next
  uint32_t min_epoch_ = 0;     ///< frames of earlier epochs are dropped
  uint32_t max_epoch_ = 0;     ///< the latest epoch any header named
  size_t expected_ = 0;        ///< the path the next frame comes on, when not scanning
  bool scanning_ = false;      ///< the next frame may be on any path
  uint64_t acked_ = 0;         ///< the last acknowledgement sent
  uint64_t lent_end_ = 0;      ///< where the last frame marked lent ends (call_received)
  bool resend_owed_ = false;
  uint32_t lost_mask_ = 0;
  double corrupt_rate_ = 0;
  std::minstd_rand corrupt_rng_;
  uint64_t corrupt_in_ = UINT64_MAX;  ///< bytes until the next flipped bit
  std::atomic<double> injected_rate_{-1};  ///< -1: none injected since the start
  bool may_strand_ = false;
  absl::Status failed_;
};

}  // namespace weft::transport::tcp
