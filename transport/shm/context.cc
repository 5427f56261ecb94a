#include "transport/shm/context.hpp"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "transport/shm/address.hpp"
#include "transport/shm/pair.hpp"

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

  // Each side creates the ring it receives on, then attaches to the peer's; neither step
  // waits for the other side's order, so connects from both ends never deadlock.
  absl::StatusOr<std::unique_ptr<Pair>> connect(const PeerInfo& peer,
                                                Deadline deadline) override {
    const std::string peer_prefix = peer.address_of("shm");
    if (peer_prefix.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", peer.rank, " published no shm address"));
    }
    auto inbound = Ring::create(ring_name(prefix_, peer.rank), ring_bytes());
    if (!inbound.ok()) return inbound.status();
    auto outbound = Ring::attach(ring_name(peer_prefix, init_.rank), deadline);
    if (!outbound.ok()) {
      return absl::Status(outbound.status().code(),
                          absl::StrCat("rank ", init_.rank, " connecting to rank ", peer.rank,
                                       " over shm: ", outbound.status().message()));
    }
    // Wait until the peer has attached to our ring too; then its name can go.
    Backoff backoff;
    while (!(inbound->header().state.load(std::memory_order_acquire) & RingHeader::kAttached)) {
      if (deadline.expired()) {
        return deadline_error(absl::StrCat("rank ", peer.rank, " to attach to rank ",
                                           init_.rank, "'s shm ring"));
      }
      backoff.pause();
    }
    inbound->unlink();
    return std::make_unique<ShmPair>(peer.rank, peer.pid, *std::move(inbound),
                                     *std::move(outbound));
  }

 private:
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
  return std::make_unique<ShmTransport>(init);
}

}  // namespace weft::transport::shm
