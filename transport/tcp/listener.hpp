// The accepting side of the tcp transport: one listening socket per rail, the handshakes of
// connections still arriving, and the sockets whose handshake is done, stashed by dialing
// rank and rail until that rank's connect() takes them.
//
// A hello is checked and acked as soon as it arrives, whoever it is for (see context.hpp for
// why); the socket is stashed once the dialer's proof checks out. A link's sockets arrive
// one by one, on any of the listening sockets and in any order; each hello names its rail
// and the link's rail count, and take() hands out a link only once all its rails are in.
// Strangers (port scanners, other jobs, garbage, silence) are closed and reported through a
// RefusalLog (src/base/refusal_log.hpp), so that a flood cannot flood the log.
//
// Not thread-safe: TcpTransport calls it under its mutex.
#pragma once

#include <poll.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "src/base/refusal_log.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/tcp/relay.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

class Listener {
 public:
  /// Takes ownership of `listen_fds`, one listening socket per rail; `address` is what the
  /// transport publishes, for messages. Relay hellos go to `relays` (relay.hpp; null: refused).
  Listener(const TransportInit& init, std::vector<int> listen_fds, std::string address,
           Relays* relays = nullptr);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// Accepts new connections and moves pending handshakes on, without blocking.
  void serve();
  /// The sockets of the link from `rank`, in rail order (and the caller owns them), once
  /// every rail has arrived, or once path_timeout_ms passed since one path of it arrived
  /// whole (pair.hpp: -1 for both sockets of each path still incomplete); else empty. Drops
  /// a socket whose dialer closed it since.
  std::vector<int> take(int rank);
  /// Appends what a wait polls for: the listening sockets (unless accepting is paused) and
  /// the pending handshakes.
  void add_poll_fds(std::vector<pollfd>& fds) const;
  /// How much of the link from `rank` has arrived, for timeout messages ("" when nothing).
  std::string progress_of(int rank) const;
  const std::string& last_rejected() const { return refusals_.last(); }
  /// Lets a due summary of refusals out.
  void tick() { refusals_.tick(); }

 private:
  /// An accepted connection whose handshake has not finished: its hello is arriving, or it
  /// was acked and its proof is arriving.
  struct Pending {
    int fd = -1;
    std::string from;  ///< the remote ip:port, for logs
    absl::Time accepted_at;
    std::array<uint8_t, kLongestMessage> buf{};
    size_t got = 0;
    bool proving = false;  ///< acked; waiting for the dialer's proof
    Handshake hello;       ///< what the dialer claimed, once acked
    Proof expected{};
  };
  /// The sockets of one link that have arrived so far.
  struct Stashed {
    Stashed() { fds.fill(-1); }
    uint32_t rail_count = 0;
    std::array<int, 2 * kMaxRails> fds;  ///< by socket (pair.hpp); -1 until it arrives
    size_t arrived = 0;
    absl::Time first_whole_path = absl::InfiniteFuture();  ///< when one path had both sockets
  };

  void accept_new(int listen_fd);
  /// Reads more of a pending handshake; returns false once the connection is settled
  /// (stashed or closed) and should leave the pending list.
  bool read_handshake(Pending& p);
  /// Acks a complete hello (false: rejected and closed).
  bool answer_hello(Pending& p);
  /// Answers a liveness query (liveness.hpp) and closes the connection.
  void answer_liveness_query(Pending& p, const Handshake& h);
  /// Stashes the connection if its proof is right, else closes it.
  void check_proof(Pending& p);

  const TransportInit init_;
  const std::vector<int> listen_fds_;
  const std::string address_;
  Relays* const relays_;
  std::vector<Pending> pending_;
  absl::flat_hash_map<int, Stashed> stash_;  ///< dialing rank -> its link's sockets so far
  /// Dialing rank -> the sockets (bit per socket) of its last link that was handed out
  /// without them: one that arrives later is closed.
  absl::flat_hash_map<int, uint64_t> missing_;
  RefusalLog refusals_;
  absl::Time accept_paused_until_ = absl::InfinitePast();
};

}  // namespace weft::transport::tcp
