#include "transport/shm/context.hpp"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "transport/shm/address.hpp"
#include "transport/shm/pair.hpp"
#include "transport/shm/single_copy.hpp"
#include "transport/shm/stale.hpp"

namespace weft::transport::shm {
namespace {

class ShmTransport : public Transport {
 public:
  explicit ShmTransport(const TransportInit& init)
      : init_(init), prefix_(ring_prefix(init.job_id, init.rank)) {}

  std::string_view name() const override { return "shm"; }
  std::string address() const override { return prefix_; }

  bool viable(const PeerInfo& self, const PeerInfo& peer) const override {
    return self.host_id == peer.host_id && !peer.address_of("shm").empty();
  }

  // The lower rank creates both rings and returns at once; the higher rank waits for them
  // and attaches. Waits only ever point from a higher rank to a lower one, so connects made
  // in any order by any number of ranks cannot wait on each other in a cycle.
  absl::StatusOr<std::unique_ptr<Pair>> connect(const PeerInfo& peer,
                                                Deadline deadline) override {
    const std::string peer_prefix = peer.address_of("shm");
    if (peer.rank == init_.rank || peer.rank < 0 || peer.rank >= init_.size ||
        peer_prefix.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", init_.rank, " cannot connect over shm to rank ", peer.rank, " of ",
          init_.size, peer_prefix.empty() ? " (it published no shm address)" : ""));
    }
    const std::string inbound_name = ring_name(prefix_, peer.rank);
    const std::string outbound_name = ring_name(peer_prefix, init_.rank);
    absl::StatusOr<Ring> inbound = absl::UnknownError("unset");
    absl::StatusOr<Ring> outbound = absl::UnknownError("unset");
    if (init_.rank < peer.rank) {
      inbound = Ring::create(inbound_name, ring_bytes());
      if (inbound.ok()) outbound = Ring::create(outbound_name, ring_bytes());
    } else {
      const int32_t pid = peer.pid;
      auto alive = [pid] { return process_alive(pid); };
      inbound = Ring::attach(inbound_name, deadline, alive);
      if (inbound.ok()) outbound = Ring::attach(outbound_name, deadline, alive);
    }
    for (const auto* ring : {&inbound, &outbound}) {
      if (!ring->ok()) {
        return absl::Status(ring->status().code(),
                            absl::StrCat("rank ", init_.rank, " connecting to rank ", peer.rank,
                                         " over shm: ", ring->status().message()));
      }
    }
    return std::make_unique<ShmPair>(peer.rank, peer.pid, *std::move(inbound),
                                     *std::move(outbound), single_copy_bytes());
  }

 private:
  // Read when a link opens, after the communicator has counted ranks and cores. When ranks
  // outnumber cores an offer holds its sender until the reader is scheduled, whereas through
  // the ring the sender runs on, so nothing is offered: 4 ranks on 2 cores ran allgather,
  // allreduce and broadcast of 512 KiB-64 MiB 1.3-3x faster than with offers from 128 KiB.
  // With a core per rank, offers from a few KiB where one read beats two copies on this
  // machine (single_copy.hpp); where it does not, only while large copies into the ring run
  // slow (the two cores far apart, transport/bulk_pace.hpp).
  // This is WEFT_SHM_SINGLE_COPY_BYTES's "auto" (src/base/env.hpp).
  size_t single_copy_bytes() const {
    constexpr size_t kOwnCores = 8 << 10;
    if (init_.single_copy_bytes.has_value()) return *init_.single_copy_bytes;
    if (Backoff::oversubscribed()) return 0;
    return single_copy_pays() ? kOwnCores : Ring::kOffersWhenSlow;
  }

  // The ring capacity must be a power of two: round the configured size down.
  size_t ring_bytes() const {
    size_t bytes = 4096;
    while (bytes * 2 <= init_.ring_bytes) bytes *= 2;
    return bytes;
  }

  TransportInit init_;
  std::string prefix_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init) {
  // A crashed job may have left rings nobody attached to; the next one clears them.
  sweep_stale_rings_once();
  return std::make_unique<ShmTransport>(init);
}

}  // namespace weft::transport::shm
