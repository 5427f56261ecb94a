// Relay paths: when a partition takes every direct path of a tcp link between two live
// ranks (both rails of a host pair cut, say), a third rank carries a new one, so the link
// and the call on it go on. The relay only copies bytes; the two ends run their framed,
// acknowledged stream over it exactly as over a direct path (pair.hpp), and authenticate
// each other through it.
//
//   A, the link's dialer            R, a relay                      B
//   socket to R: hello kRelay (to R, rail = B), ack, proof
//                                   R dials B, then copies bytes both ways
//   through R: hello kAddPath (A to B, rail = attempt << 1 | 0 data, 1 control), ack, proof
//                                                                   B's listener hands it to
//                                                                   its link to A
//
// A path is two sockets, so A makes two. Each end's pair is stranded rather than failed when
// its last path times out, asks for a path (PathIntake::want), and adopts one once both its
// sockets are in. Both sockets carry the number of A's attempt, and B pairs only sockets of
// one attempt: an attempt that failed halfway leaves one socket behind at B, and a later
// attempt's twin must not be paired with it (the ends would run the path over different
// sockets, and A would send where B never reads). A makes one attempt at a time, and none
// while its own pair has not yet taken the last one in. A link whose paths ended in a close or a reset lost a peer that exited:
// it fails at once, as before. A's transport tries relays on a third host first.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "src/base/mutex.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

/// The most paths a link adds over its life.
inline constexpr size_t kMaxAddedPaths = 4;

/// Between the transport's threads and one link's pair: sockets of paths added to the link,
/// and the pair's wish for one.
class PathIntake {
 public:
  struct NewPath {
    int data = -1;
    int control = -1;
    std::string via;  ///< "rank 2", for the log
    uint32_t attempt = 0;  ///< the dialer's attempt both sockets came from
  };

  explicit PathIntake(int peer) : peer_(peer) {}
  ~PathIntake();
  int peer() const { return peer_; }

  /// The pair, when it becomes stranded (true) or has a path again (false).
  void want(bool yes) { wanted_.store(yes, std::memory_order_release); }
  bool wanted() const { return wanted_.load(std::memory_order_acquire); }
  /// Socket `which` (0 data, 1 control) of the dialer's attempt `attempt` at a new path
  /// through `via`. An unpaired socket of an earlier attempt is closed; so is `fd` when it
  /// comes from an earlier attempt than one already in. Takes ownership of `fd`.
  void offer(int which, uint32_t attempt, int fd, std::string via);
  /// A whole new path, if one is in; one atomic load when none is.
  std::optional<NewPath> take();
  /// Whether a whole path is in, not yet taken.
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  /// Why the last attempt to add a path failed, for the pair's error.
  void note_failure(std::string why);
  std::string failure() const;

 private:
  const int peer_;
  std::atomic<bool> wanted_{false};
  std::atomic<bool> ready_{false};
  mutable Mutex mu_;
  NewPath pending_ ABSL_GUARDED_BY(mu_);
  uint32_t last_attempt_ ABSL_GUARDED_BY(mu_) = 0;  ///< the newest attempt offered
  std::string failure_ ABSL_GUARDED_BY(mu_);
};

/// One rank's part in relay paths, owned by its tcp transport: the dialer's attempts, the
/// relay's copying, and the intakes of its links.
class Relays {
 public:
  explicit Relays(const TransportInit& init) : init_(init) {}
  /// Stops every copying and dialing thread and waits for them.
  ~Relays();
  Relays(const Relays&) = delete;
  Relays& operator=(const Relays&) = delete;

  /// Every rank's tcp address and host; until this is called no link gets a relay path.
  void learn_peers(const std::vector<PeerInfo>& peers);
  /// The intake of the link to `peer`, registered, or null when relays are off (fewer than
  /// three ranks, no peers learned, WEFT_RELAY_PATHS=off).
  std::shared_ptr<PathIntake> intake_for(int peer);
  /// Starts an attempt for each link this rank dials that wants a path and has none under
  /// way (the acceptor thread calls it every tick).
  void tick();
  /// A proven kRelay socket from rank `from`: connects it through to rank `to`. Takes `fd`.
  void relay(int fd, int from, int to);
  /// A proven kAddPath socket from rank `from` (which: 0 data, 1 control) of that rank's
  /// attempt `attempt`. Takes `fd`.
  void deliver(int from, int which, uint32_t attempt, int fd, const std::string& via);

 private:
  struct Peer {
    std::string address;  ///< its published tcp address list
    std::string host;
  };
  /// Tries relays for the link to intake->peer() until one carries a path or the link no
  /// longer wants one; runs on a thread of its own.
  void add_path(std::shared_ptr<PathIntake> intake);
  /// Ranks that may relay between this rank and `peer`, best first.
  std::vector<int> candidates(int peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void start(std::function<void()> body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TransportInit init_;
  std::atomic<bool> stopping_{false};
  Mutex mu_;
  std::vector<Peer> peers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, std::weak_ptr<PathIntake>> intakes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, bool> dialing_ ABSL_GUARDED_BY(mu_);  ///< peer -> attempt under way
  uint32_t attempts_ ABSL_GUARDED_BY(mu_) = 0;  ///< this rank's attempts, numbered from 1
  std::vector<int> copied_fds_ ABSL_GUARDED_BY(mu_);  ///< sockets the relay copies between
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft::transport::tcp
