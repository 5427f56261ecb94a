// One socket of a link that this rank dials (the lower rank of a pair dials the higher):
// connect, send the hello, check the ack and the listener's proof, send our proof. A link
// over K rails runs K dials side by side, each naming its rail in the hello. Refused and
// dropped attempts are retried with backoff while the peer may still be starting up.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transport/tcp/address.hpp"
#include "transport/tcp/handshake.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

struct Dial {
  enum Phase { kIdle, kConnecting, kSending, kAwaitingAck, kSendingProof, kDone };

  /// `local`: the address to send from (the rail's), or none to let routing pick.
  Dial(const TransportInit& init, int peer_rank, std::string text, const SockAddr& remote,
       std::optional<SockAddr> local, uint32_t rail, uint32_t rail_count);
  ~Dial();
  Dial(const Dial&) = delete;
  Dial& operator=(const Dial&) = delete;

  /// Moves on as far as it goes without blocking; `revents` from the last poll of fd.
  void advance(short revents);
  /// What to poll fd for; 0 when idle or done.
  short events() const;
  /// Where the dial stands, for a timeout message.
  std::string describe() const;

  const TransportInit& init;
  const int peer_rank;
  const std::string text;  ///< the peer address this socket dials, published form
  const SockAddr addr;
  const std::optional<SockAddr> local;
  int fd = -1;
  Phase phase = kIdle;
  Handshake hello;  ///< sent on every attempt, with a fresh nonce each
  HelloWire out{};
  AckWire in{};
  Proof proof{};
  size_t sent = 0, got = 0;
  absl::Time retry_at = absl::InfinitePast();
  absl::Duration backoff;
  std::string problem = "no connection attempt has finished";
  int failures = 0;  ///< attempts refused or dropped so far
  absl::Status fatal;

 private:
  void start();
  /// Refused or dropped connections are normal while the peer is still starting up.
  void retry_later(std::string why);
  /// connect(2) failed with `err`: retry later, or give up (init.refused_means_gone).
  void connect_failed(int err);
  void read_ack();
};

}  // namespace weft::transport::tcp
