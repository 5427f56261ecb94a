// The transport interface. A Transport (one per communicator and kind) publishes an address
// and connects Pairs; a Pair is one link to one peer: a reliable, ordered byte stream each
// way, driven without blocking so one thread can keep several links moving.
//
// Every transport folder has the same files: context.{hpp,cc} (the Transport), pair.{hpp,cc}
// (the link) and address.{hpp,cc} (what the Transport publishes in bootstrap).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/base/copy.hpp"
#include "src/base/deadline.hpp"
#include "src/base/job_secret.hpp"
#include "src/base/peer_info.hpp"

namespace weft::transport {

/// A count that a link's own thread adds to and any thread may read (a health monitor):
/// a plain load and store on the data path, with no locked instruction, and no data race.
/// Only one thread may add.
class LinkCounter {
 public:
  void add(uint64_t n) {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

/// Counters a link keeps about itself; the health monitor reads them.
struct PairStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_sent_single_copy = 0;  ///< of bytes_sent: read by the peer from our memory
  uint64_t bytes_received = 0;
  uint64_t errors = 0;
  // A link that outlives its paths (tcp): what faults it survived.
  uint64_t path_failures = 0;    ///< paths lost, either direction
  uint64_t resumptions = 0;      ///< epochs the sender started to send again
  uint64_t bytes_resent = 0;     ///< bytes those resumptions sent again
  uint64_t checksum_errors = 0;  ///< received frames whose CRC32C did not match
};

/// Faults injected on links, for tests and scripts/inject (WEFT_INJECT_*).
struct LinkFaults {
  /// The link to this peer (-1: none) loses the outbound path that carries stream byte
  /// kill_at: just before sending it, or, with kill_header_bytes >= 0, after that many bytes
  /// of the header of the frame that starts at kill_at.
  int kill_peer = -1;
  uint64_t kill_at = 0;
  int kill_header_bytes = -1;
  /// Each byte received from a peer in corrupt_peers (empty: every peer) has a bit flipped
  /// with this probability, after the sender's checksum and before the receiver's check.
  double corrupt_rate = 0;
  std::vector<int> corrupt_peers;
};

/// Receives one counter a link reads about one of its paths, for the health monitor:
/// `path` names it (tcp: the rail's interface), `cumulative` says the value only grows
/// (retransmits) rather than being a level (rtt).
using PathCounterSink = absl::FunctionRef<void(std::string_view path, std::string_view counter,
                                               double value, bool cumulative)>;

/// Receives a contiguous run of bytes that arrived on a link. The bytes are valid only
/// during the call.
using Sink = absl::FunctionRef<void(const std::byte* data, size_t len)>;

/// A stream of bytes in two places, for a header and what follows it: byte i is at
/// first + i below first_len, else at rest + (i - first_len). A Scatter says where received
/// bytes go (Pair::recv_scatter), a Gather where the bytes of a send come from
/// (Pair::send_gathered).
template <typename Byte>
struct TwoPlaces {
  Byte* first;
  size_t first_len;
  Byte* rest;

  Byte* at(size_t i) const { return i < first_len ? first + i : rest + (i - first_len); }
  /// How many bytes from byte i on lie contiguously at at(i).
  size_t run_from(size_t i) const { return i < first_len ? first_len - i : SIZE_MAX - i; }
  /// Copies bytes [i, i + n) of the stream to `dst`.
  void copy_out(std::byte* dst, size_t i, size_t n) const {
    if (n <= run_from(i)) return copy_bytes(dst, at(i), n);
    const size_t head = first_len - i;
    copy_bytes(dst, first + i, head);
    copy_bytes(dst + head, rest, n - head);
  }
  /// Copies `n` bytes from `src` to bytes [i, i + n) of the stream (Scatter only).
  void copy_in(const std::byte* src, size_t i, size_t n) const {
    if (n <= run_from(i)) return copy_bytes(at(i), src, n);
    const size_t head = first_len - i;
    copy_bytes(first + i, src, head);
    copy_bytes(rest, src + head, n - head);
  }
};
using Scatter = TwoPlaces<std::byte>;
using Gather = TwoPlaces<const std::byte>;

class Pair {
 public:
  virtual ~Pair() = default;

  virtual int peer() const = 0;

  /// Takes up to `len` bytes without blocking and returns how many it took (0 when the link
  /// is full). The bytes are copied or on the wire when this returns.
  virtual absl::StatusOr<size_t> send_some(const std::byte* data, size_t len) = 0;

  /// As send_some, for bytes the caller follows at once with more (a round's state, then
  /// its data): a transport may hold them back a moment to put both on the wire together
  /// (tcp: in its ring, to leave in one frame with the next send's bytes; one packet instead
  /// of two, each of which costs the receiving host microseconds). Held bytes leave with the
  /// next send, and without one soon after: ucx's worker thread sends them once calls stop
  /// driving the worker (1-32 ms), tcp with the link's next receive that finds nothing, or
  /// tend() (which a waiting collective's Waiter and the link tender call on every link).
  virtual absl::StatusOr<size_t> send_some_more(const std::byte* data, size_t len) {
    return send_some(data, len);
  }

  /// As send_some, for the first `len` bytes of `from`: a call check's state and the data
  /// carried behind it leave in one send, the data from where it lies. By default the two
  /// are gathered into one buffer on the stack (at most kGatherBytes) and sent with
  /// send_some; transports override it where they can take both pieces straight (shm, ucx).
  static constexpr size_t kGatherBytes = 2048;
  virtual absl::StatusOr<size_t> send_gathered(const Gather& from, size_t len);

  /// As send_some, for bytes the peer only copies (it does not reduce them): a transport may
  /// then let the peer read a large send straight from `data` (shm's single copy) and count
  /// bytes as taken once the peer has read them. Until all are taken, the caller calls again
  /// with the rest of the same, unchanged buffer.
  virtual absl::StatusOr<size_t> offer_some(const std::byte* data, size_t len) {
    return send_some(data, len);
  }

  /// As offer_some, for bytes the caller leaves unchanged until the call ends (call_ends()),
  /// unless the peer has read them first: the caller's send buffer, or a result that is final.
  /// A transport that keeps what it sent, to send it again after a path fails (tcp), may then
  /// keep it where it lies instead of copying it, and count it taken once in a kernel's hands.
  virtual absl::StatusOr<size_t> lend_some(const std::byte* data, size_t len) {
    return offer_some(data, len);
  }
  /// As lend_some, for the caller's input, which the call has not written (an allgather's own
  /// block, a broadcast's at its root): it is no likelier in this core's cache than in the
  /// peer's, so a transport that can let the peer read it in one copy instead of copying it
  /// twice through shared memory should (ucx between processes of one host).
  virtual absl::StatusOr<size_t> lend_input(const std::byte* data, size_t len) {
    return lend_some(data, len);
  }
  /// As lend_some, for bytes the peer reduces into its own as they land (a reduce-scatter's
  /// first step): a transport that moves a large send as a few whole messages may cut these
  /// finer, so that the peer reduces each piece while it is still in its cache (ucx).
  virtual absl::StatusOr<size_t> lend_to_reduce(const std::byte* data, size_t len) {
    return lend_some(data, len);
  }
  /// The call's last receive is done: a transport that acknowledges what it received may do
  /// so now, so that the peer's call_ends finds its lent bytes acknowledged. The communicator
  /// calls it on every link a call used before it calls call_ends on any.
  virtual void call_received() {}
  /// The call ends: bytes lent in it (lend_some) may change from now on. The communicator
  /// calls it, on the link's own thread, for every link a call used.
  virtual void call_ends() {}

  /// Hands up to `max` received bytes to `sink` without blocking (possibly in several
  /// calls) and returns how many it handed over.
  virtual absl::StatusOr<size_t> recv_some(size_t max, Sink sink) = 0;

  /// Copies up to `max` received bytes to where `to` says without blocking and returns the
  /// count: a call check's state and the data carried behind it take one read, each straight
  /// where it belongs. Transports override it where they can skip a copy; by default it is
  /// recv_some.
  virtual absl::StatusOr<size_t> recv_scatter(const Scatter& to, size_t max);
  /// recv_scatter into one place, `dst`.
  absl::StatusOr<size_t> recv_into(std::byte* dst, size_t max) {
    return recv_scatter(Scatter{dst, max, nullptr}, max);
  }

  /// Whether write_to_peer works on this link (shm, once this side has proven it may read the
  /// peer's memory: the kernel allows writing it on the same terms).
  virtual bool can_write_to_peer() const { return false; }
  /// Copies `len` bytes straight into the peer's memory at `address`, an address the peer
  /// sent for this purpose; done when it returns. The caller then tells the peer over the
  /// link. Unimplemented where can_write_to_peer() is false.
  virtual absl::Status write_to_peer(uint64_t address, const std::byte* data, size_t len);

  /// Ok while the peer may still make progress; an error once it is known to be gone
  /// (process exited, connection closed). Waits call it while they sleep.
  virtual absl::Status check_peer() = 0;

  virtual PairStats stats() const = 0;

  /// One path of the link, for LinkStats (any thread; the strings are read under the
  /// caller's lock against link teardown only, so transports fill them from state that
  /// changes once, when a path dies).
  struct PathView {
    std::string name;
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
    bool alive = true;
    std::string failure;
  };
  /// Every path of the link; empty by default (a link with one fixed path).
  virtual std::vector<PathView> paths() const { return {}; }

  /// Hands `sink` what each path of the link reports about itself (tcp: TCP_INFO of each
  /// rail's socket). Called from the health monitor's thread while the link's own thread
  /// drives it, so it reads only what is safe to read meanwhile (the kernel's socket state);
  /// the caller keeps the pair alive throughout. By default a link reports nothing.
  virtual void read_path_counters(PathCounterSink sink) const {}

  /// Keeps the link's own protocol moving while its caller is elsewhere (tcp: reads
  /// acknowledgements and resend requests, sends again what a resumption owes, acknowledges
  /// what it consumed); cheap when there is nothing to do. Never blocks. Called by waits on
  /// other links and, between calls, by the communicator's tender (src/link_tender.hpp),
  /// never by two threads at once. Returns whether the link still has work outstanding
  /// (bytes not yet acknowledged, an acknowledgement not yet sent).
  virtual bool tend() { return false; }

  /// Takes the link's paths over rail `ifname` out of use for sending (`in_use` false) or
  /// back: from the next frame on its bytes stripe over the other rails, whose sockets stay
  /// open. Both ends call it at the same point of their streams (a route change adopted at a
  /// call boundary, src/route.hpp). A link never takes its last usable path out of use; one
  /// with a single fixed path ignores it. The link's own thread only.
  ///
  /// `announce` false: a change that is nobody's news (weft diag probe measuring one rail at
  /// a time); the link counts it but does not log it. Route changes are logged.
  virtual void use_rail(std::string_view ifname, bool in_use, bool announce = true) {}
  /// The interfaces of the link's rails, in rail order: the names use_rail takes (tcp; empty
  /// for a link with one fixed path). The link's own thread only.
  virtual std::vector<std::string> rail_names() const { return {}; }

  /// Carries the link through a third rank rather than over its own paths (`on`), or back:
  /// for a link health took out of use (src/isolation.hpp) that still carries traffic (no
  /// ring avoids it, or a call under way when it was judged). A link with no such path
  /// (shm, two ranks, WEFT_RELAY_PATHS=off) carries on over its own. Any thread; the link
  /// applies it on its own thread.
  virtual void detour(bool on) {}

  /// A fault for tests and scripts/inject: flips a bit in each byte received with probability
  /// `rate` (0 ends it), after the sender's checksum and before this side's check. Any
  /// thread; transports without it ignore it.
  virtual void inject_corruption(double rate) {}

  /// Counts a wait on this link that saw no byte move for the stall time (Waiter): a health
  /// counter the transports observe. Only the thread that drives the link calls it.
  void note_stall() { stalls_.add(1); }
  /// Stalls so far; any thread.
  uint64_t stalls() const { return stalls_.get(); }

 private:
  LinkCounter stalls_;
};

/// What every transport needs to know about the communicator it serves.
struct TransportInit {
  int rank = -1;
  int size = 0;
  uint64_t job_id = 0;          ///< shared by every rank of one communicator
  JobSecret secret{};           ///< shared by every rank; connections prove they know it
  /// tcp: the rails to listen on, WEFT_SOCKET_IFNAME's syntax (transport/tcp/rails.hpp);
  /// empty: one rail on the default interface
  std::string socket_ifname;
  size_t ring_bytes = 1 << 20;  ///< capacity of one direction of a shared-memory ring
  /// shm: sends this large are read from the sender's memory (0: never); unset: the shm
  /// transport picks by whether ranks outnumber cores
  std::optional<size_t> single_copy_bytes;
  /// tcp: every peer's listener was up before the first connect (shrink's control plane), so
  /// a refused dial means the peer is gone and fails at once; otherwise it is retried, since
  /// the peer may still be starting.
  bool refused_means_gone = false;
  /// tcp: one socket per link, on the first rail both ends share, however many they share
  /// (shrink's control plane, whose few small messages gain nothing from striping).
  bool single_rail = false;
  /// tcp: paths a link opens per rail and direction (WEFT_SOCKETS_PER_RAIL): more to stripe
  /// over, and to fail over between when one socket breaks.
  int sockets_per_rail = 1;
  /// tcp: what this rank has concluded about a fault (tcp/liveness.hpp's Blame, packed), which
  /// its listener tells whoever asks whether this rank is alive; null: nothing concluded.
  const std::atomic<uint64_t>* blame = nullptr;
  /// tcp: every data frame carries a CRC32C the receiver checks before it hands a byte over
  /// (WEFT_CHECKSUM).
  bool checksum = false;
  /// tcp: a path whose sent bytes go unacknowledged this long is dead (TCP_USER_TIMEOUT;
  /// keepalive probes an idle one as often), and the link moves on (WEFT_PATH_TIMEOUT_MS).
  int path_timeout_ms = 5000;
  /// tcp: a link whose every path timed out gets a path through a third rank (relay.hpp;
  /// WEFT_RELAY_PATHS).
  bool relay_paths = true;
  /// WEFT_TRANSPORT names this transport: it links every pair it can reach, even where
  /// another would be the default (ucx between ranks of one host, or over plain tcp).
  bool forced = false;
  /// The rails WEFT_SOCKET_IFNAME named, as interfaces (empty: it was unset); ucx makes
  /// them its UCX_NET_DEVICES unless the user set that.
  std::vector<std::string> rail_ifnames;
  LinkFaults faults;
};

class Transport {
 public:
  virtual ~Transport() = default;

  /// "shm", "tcp", ...
  virtual std::string_view name() const = 0;

  /// The address peers use to connect; published in bootstrap.
  virtual std::string address() const = 0;

  /// Whether this transport can link `self` to `peer` (host memory).
  virtual bool viable(const PeerInfo& self, const PeerInfo& peer) const = 0;

  /// Connects to `peer`. Both ranks call connect for each other, in any order and from any
  /// number of ranks at once; the call returns once the link can carry data both ways
  /// (bytes may wait until the peer's own connect returns) or fails by the deadline. A
  /// transport may return before the peer arrives (shm's lower rank creates the rings and
  /// returns); a peer that never comes then shows as a deadline on the first data wait.
  virtual absl::StatusOr<std::unique_ptr<Pair>> connect(const PeerInfo& peer,
                                                        Deadline deadline) = 0;

  /// Every rank's PeerInfo, once the bootstrap has them and before the first connect():
  /// tcp picks relays from them (tcp/relay.hpp).
  virtual void learn_peers(const std::vector<PeerInfo>& peers) {}
};

/// Whether this weft has the ucx transport and the host an RDMA device for it: then ucx
/// links ranks of different hosts unless WEFT_TRANSPORT says otherwise.
bool ucx_wanted_by_default();

/// What `weft info` says about the ucx transport: UCX's version and memory types, or why
/// there is none.
std::string ucx_description();

/// Creates the named transport ("shm", "tcp" or "ucx") for one communicator.
absl::StatusOr<std::unique_ptr<Transport>> make_transport(std::string_view name,
                                                          const TransportInit& init);

}  // namespace weft::transport
