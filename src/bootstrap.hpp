// The TCP rendezvous: every rank connects to one server, says who it is, and gets back the
// PeerInfo of every rank. The server is a thread in one process (the caller of
// make_unique_id, or rank 0 under WEFT_COORDINATOR) that serves a single rendezvous and ends;
// it is declared in rendezvous_server.hpp, and this header brings it along.
//
// Wire format (integers little-endian):
//   hello      "WEFT" u16 version u16 0 u64 job_id u32 rank u32 size u32 blob_len
//              u8[16] nonce, blob
//   challenge  "WEFT" u32 kChallengeCode u8[16] nonce u8[32] server proof
//   proof      u8[32] rank proof
//   reply      "WEFT" u32 code (absl::StatusCode), then
//                code 0:  u32 count, count x (u32 blob_len, blob)  -- blob i is rank i's
//                else:    u32 len, message                         -- why this rank was refused
// Blobs are PeerInfo::encode() and at most kMaxPeerBlobBytes. A hello from another job or
// version gets its refusal at once; any other hello gets the challenge, and the rank counts
// only once its proof of the job secret checks out (src/base/job_secret.hpp): the server's proof
// covers the rank's nonce and the rank's covers the server's, so neither can be replayed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/base/deadline.hpp"
#include "src/base/peer_info.hpp"
#include "src/rendezvous_server.hpp"
#include "src/unique_id.hpp"
#include "weft/weft.hpp"

namespace weft {

/// Largest PeerInfo blob a rank may send; anything longer is dropped as garbage.
inline constexpr uint32_t kMaxPeerBlobBytes = 64 * 1024;

/// Meets the other ranks at the rendezvous named by `id`: connects (retrying while nothing
/// listens yet, since the server may start after this rank), sends `self` as `rank` of
/// `size`, and returns every rank's PeerInfo, indexed by rank. self.rank must be -1 or
/// `rank`. Errors: InvalidArgument for a bad id/rank/size or when the server refused this
/// rank (its message says why, e.g. both sizes on a mismatch); DeadlineExceeded when the
/// table did not arrive in time; Unavailable when the rendezvous went away.
absl::StatusOr<std::vector<PeerInfo>> bootstrap_exchange(const UniqueId& id, int rank, int size,
                                                         const PeerInfo& self, Deadline deadline);

/// The WEFT_COORDINATOR flavour: rank 0 serves the rendezvous on host_port's port and waits
/// until every rank got the table; every rank, rank 0 included, then runs bootstrap_exchange
/// with unique_id_for_coordinator(). Rank 0 listens on one address only, never on every
/// interface, so that only the network the job uses can reach the rendezvous:
///   - a loopback host_port (a single-host job): that address;
///   - with `socket_ifname` (WEFT_SOCKET_IFNAME): the address host_port resolves to when that
///     interface holds it, else the interface's own address (choose_listen_ip, as the tcp
///     transport does), with a warning that the other ranks must resolve the name to it;
///   - without: the address host_port resolves to, which must be one of this host's
///     (FailedPrecondition otherwise, saying to set WEFT_SOCKET_IFNAME or WEFT_COORDINATOR).
/// Rank 0 dials its server where it listens.
absl::StatusOr<std::vector<PeerInfo>> bootstrap_from_coordinator(const std::string& host_port,
                                                                 const std::string& socket_ifname,
                                                                 int rank, int size,
                                                                 const PeerInfo& self,
                                                                 Deadline deadline);
/// As above, with `id` = unique_id_for_coordinator(host_port) already made by the caller
/// (it resolves the host and reads the job secret: once is enough).
absl::StatusOr<std::vector<PeerInfo>> bootstrap_from_coordinator(const std::string& host_port,
                                                                 UniqueId id,
                                                                 const std::string& socket_ifname,
                                                                 int rank, int size,
                                                                 const PeerInfo& self,
                                                                 Deadline deadline);

}  // namespace weft
