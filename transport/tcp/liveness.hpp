// Liveness queries: "are you alive, and what have you concluded?", asked of a rank's tcp
// listener after a call failed, so that the survivors can name the rank that stopped.
//
// A deadline tells a rank only that the peers it waited on did not deliver; they may be
// waiting on someone else in turn (in a ring, everyone waits on a neighbour). So a rank whose
// call failed asks every peer's control listener (shrink's, src/shrink.hpp) directly. The
// query is a hello whose verdict is kQuery. The listener's own thread answers it at once,
// even while its rank's thread is blocked inside a collective, with an ack whose verdict is
// kAlive, proven with the job secret like every ack (so nobody else can answer for a rank),
// whose rail and rail count fields carry what that rank has concluded itself (a Blame). A
// stopped process answers nothing; a dead one's port refuses the connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "transport/tcp/handshake.hpp"
#include "transport/transport.hpp"

namespace weft::transport::tcp {

/// What a rank concluded about a fault: which rank, and how it failed.
struct Blame {
  enum Kind : uint32_t {
    kNone = 0,     ///< nothing concluded (no fault, or no rank at fault)
    kStopped = 1,  ///< `rank` answered no query: stopped, hung, or cut off
    kGone = 2,     ///< `rank`'s listener refuses connections: its process exited
  };
  Kind kind = kNone;
  int rank = -1;

  /// For an atomic the listener's thread reads (TransportInit::blame).
  uint64_t pack() const { return (uint64_t{kind} << 32) | static_cast<uint32_t>(rank + 1); }
  static Blame unpack(uint64_t v);
};

/// How one peer answered. Over several addresses (rails) the best answer counts: a live
/// rank may be unreachable on one rail, an exited one refuses on all.
struct PeerAnswer {
  /// In order of precedence; kUnknown: this rank could not ask (out of descriptors, say),
  /// which says nothing about the peer.
  enum Outcome { kAlive, kSilent, kGone, kUnknown };
  int rank = -1;
  Outcome outcome = kSilent;
  Blame blame;         ///< what the peer concluded (kAlive only)
  std::string detail;  ///< why kGone ("connection refused", ...)
};

/// Asks each peer (rank, published tcp address list) at every address at once and waits
/// `wait` at most; a peer that has not answered by then is kSilent. `init` is the asking transport's (job
/// id, rank, secret).
std::vector<PeerAnswer> ask_alive(const TransportInit& init,
                                  const std::vector<std::pair<int, std::string>>& peers,
                                  absl::Duration wait);

/// The listener's side: the ack that answers `hello` (a kQuery for this rank), carrying
/// `blame`, proven with `init`'s secret.
AckWire answer_query(const TransportInit& init, const HelloWire& hello, const Handshake& h,
                     Blame blame);

}  // namespace weft::transport::tcp
