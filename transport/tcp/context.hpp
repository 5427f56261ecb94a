// The tcp transport: reaches any rank over TCP sockets, between hosts or on one host, over
// every rail (network interface, rails.hpp) that WEFT_SOCKET_IFNAME allows.
//
// Connection protocol. Every rank listens on one socket per rail and publishes all their
// addresses. For each pair of ranks the LOWER rank dials: one socket per rail both ranks
// can use (rails.hpp), each with its own hello (magic, version, job id, both ranks,
// communicator size, rail index and rail count); the higher rank checks it and answers with
// an ack that carries its own identity and a verdict, so a dialer that reached the wrong job
// or rank can say so at once instead of timing out. Both prove they know the job secret
// along the way (handshake.hpp); the listener takes a socket only after the dialer's proof,
// and the link only once every rail has arrived. The link then stripes its byte stream over
// its sockets (pair.hpp).
//
// Connections are lazy and connect() calls come in any order, so while a rank waits in
// connect() for one peer it keeps serving its listener: hellos from other ranks are acked
// and stashed for their own connect() later (listener.hpp). Acking on arrival, rather than
// when the matching connect() runs, is what keeps a cycle of ranks that each wait for the
// next one from deadlocking. Between connect() calls a thread of the transport's own serves
// the listener, so a stranger that arrives once the links are up is refused at once rather
// than left in the kernel's backlog, and a peer's hello never waits for this rank's next
// connect() to be acked.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "src/base/mutex.hpp"
#include "transport/tcp/listener.hpp"
#include "transport/tcp/rails.hpp"
#include "transport/tcp/relay.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

struct Dial;

class TcpTransport : public Transport {
 public:
  /// Listens on every rail choose_rails(init.socket_ifname) names, each on an ephemeral port.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> create(const TransportInit& init);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  std::string_view name() const override { return "tcp"; }
  /// Every rail's ip:port, comma-separated; a single ip:port with one rail.
  std::string address() const override { return address_; }
  /// True whenever the peer published a tcp address: tcp reaches every host.
  bool viable(const PeerInfo& self, const PeerInfo& peer) const override;
  /// Thread-safe: concurrent calls share the listener.
  absl::StatusOr<std::unique_ptr<Pair>> connect(const PeerInfo& peer,
                                                Deadline deadline) override;
  void learn_peers(const std::vector<PeerInfo>& peers) override { relays_.learn_peers(peers); }

 private:
  TcpTransport(const TransportInit& init, std::vector<Rail> rails, std::vector<int> listen_fds,
               std::string address);

  /// The dials of a link to the higher rank `peer`: one per route (rails.hpp).
  absl::StatusOr<std::vector<std::unique_ptr<Dial>>> plan_dials(const PeerInfo& peer) const;
  absl::Status timeout_error(int peer_rank, const std::string& peer_addr,
                             const std::vector<std::unique_ptr<Dial>>& dials)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  /// The acceptor thread's loop: serves the listener, sleeping in poll() without the lock,
  /// until the destructor writes to wake_fd_.
  void serve_until_stopped();

  const TransportInit init_;
  const std::vector<Rail> rails_;
  const std::string address_;

  Relays relays_;  // before the listener, which hands it relay sockets, and after it goes
  Mutex mu_;
  Listener listener_ ABSL_GUARDED_BY(mu_);
  int wake_fd_ = -1;  // eventfd: the destructor stops the acceptor through it
  std::thread acceptor_;
};

/// Creates the tcp transport for one communicator.
absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init);

}  // namespace weft::transport::tcp
