// The tcp transport: reaches any rank over TCP sockets, between hosts or on one host.
//
// Connection protocol. Every rank listens on one socket (the address it publishes). For
// each pair of ranks the LOWER rank dials the higher rank's listener and sends a hello
// (magic, version, job id, both ranks, communicator size); the higher rank checks it and
// answers with an ack that carries its own identity and a verdict, so a dialer that
// reached the wrong job or rank can say so at once instead of timing out. Both prove they
// know the job secret along the way (handshake.hpp); the listener takes the connection
// only after the dialer's proof.
//
// Connections are lazy and connect() calls come in any order, so while a rank waits in
// connect() for one peer it keeps serving its listener: hellos from other ranks are
// acked and stashed for their own connect() later. Acking on arrival, rather than when the
// matching connect() runs, is what keeps a cycle of ranks that each wait for the next one
// from deadlocking. Strangers (port scanners, other jobs, garbage, silence) are logged and
// closed without disturbing anything.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "src/mutex.hpp"
#include "absl/time/time.h"
#include "transport/tcp/handshake.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

class TcpTransport : public Transport {
 public:
  /// Listens on the interface chosen by choose_listen_ip(init.socket_ifname), on an
  /// ephemeral port.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> create(const TransportInit& init);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  std::string_view name() const override { return "tcp"; }
  std::string address() const override { return address_; }
  /// True whenever the peer published a tcp address: tcp reaches every host.
  bool viable(const PeerInfo& self, const PeerInfo& peer) const override;
  /// Thread-safe: concurrent calls share the listener.
  absl::StatusOr<std::unique_ptr<Pair>> connect(const PeerInfo& peer,
                                                Deadline deadline) override;

 private:
  struct Dial;
  /// An accepted connection whose handshake has not finished: its hello is arriving, or
  /// it was acked and its proof is arriving.
  struct Pending {
    int fd = -1;
    std::string from;  ///< the remote ip:port, for logs
    absl::Time accepted_at;
    std::array<uint8_t, kLongestMessage> buf{};
    size_t got = 0;
    bool proving = false;  ///< acked; waiting for the dialer's proof
    int claimed_rank = -1;
    Proof expected{};
  };

  TcpTransport(const TransportInit& init, int listen_fd, std::string address);

  /// Accepts new connections and moves pending hellos on, without blocking.
  void serve_listener() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void accept_new() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Reads more of a pending handshake; returns false once the connection is settled
  /// (stashed or closed) and should leave the pending list.
  bool read_handshake(Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Acks a complete hello (false: rejected and closed).
  bool answer_hello(Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Stashes the connection if its proof is right, else closes it.
  void check_proof(Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The stashed connection from `rank`, or -1; drops one the dialer has closed since.
  int take_stashed(int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Moves a dial on as far as it goes without blocking; `revents` from its last poll.
  void advance_dial(Dial& dial, short revents);
  /// A dial's connect(2) failed with `err`: retry later, or give up (refused_means_gone).
  void connect_failed(Dial& dial, int err);
  absl::Status timeout_error(int peer_rank, const std::string& peer_addr, const Dial* dial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void reject(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TransportInit init_;
  const int listen_fd_;
  const std::string address_;

  Mutex mu_;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, int> stash_ ABSL_GUARDED_BY(mu_);  ///< rank -> acked socket
  std::string last_rejected_ ABSL_GUARDED_BY(mu_);  ///< for timeout messages
  absl::Time accept_paused_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

/// Creates the tcp transport for one communicator.
absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init);

}  // namespace weft::transport::tcp
