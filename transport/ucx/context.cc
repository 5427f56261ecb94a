#include "transport/ucx/context.hpp"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/ucx/address.hpp"
#include "transport/ucx/pair.hpp"
#include "transport/ucx/worker.hpp"

namespace weft::transport::ucx {
namespace {

class UcxTransport : public Transport {
 public:
  UcxTransport(const TransportInit& init, std::shared_ptr<Worker> worker)
      : init_(init), worker_(std::move(worker)), host_id_(local_host_id()) {}

  std::string_view name() const override { return "ucx"; }
  std::string address() const override { return worker_->address(); }

  bool viable(const PeerInfo& self, const PeerInfo& peer) const override {
    return !peer.address_of("ucx").empty() && (init_.forced || self.host_id != peer.host_id);
  }

  absl::StatusOr<std::unique_ptr<Pair>> connect(const PeerInfo& peer, Deadline deadline) override {
    const std::string address = peer.address_of("ucx");
    if (peer.rank == init_.rank || peer.rank < 0 || peer.rank >= init_.size || address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", init_.rank, " cannot connect over ucx to rank ", peer.rank, " of ", init_.size,
          address.empty() ? " (it published no ucx address)" : ""));
    }
    UcxPair::Options o;
    o.self = init_.rank;
    o.peer = peer.rank;
    o.peer_pid = peer.pid;
    o.same_host = peer.host_id == host_id_;
    o.tag_out = link_tag(init_.secret, init_.job_id, init_.rank, peer.rank);
    o.tag_in = link_tag(init_.secret, init_.job_id, peer.rank, init_.rank);
    o.stall_ms = init_.path_timeout_ms;
    auto pair = UcxPair::open(worker_, address, o, deadline);
    if (!pair.ok()) return pair.status();
    return std::unique_ptr<Pair>(*std::move(pair));
  }

 private:
  TransportInit init_;
  std::shared_ptr<Worker> worker_;  // the links hold it too: it outlives the last of them
  std::string host_id_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> make_transport(const TransportInit& init) {
  auto worker = Worker::create(absl::StrJoin(init.rail_ifnames, ","), init.size);
  if (!worker.ok()) return worker.status();
  return std::make_unique<UcxTransport>(init, *std::move(worker));
}

std::string describe() {
  auto info = describe_ucx();
  if (!info.ok()) return absl::StrCat("UCX unusable here: ", info.status().message());
  return absl::StrCat("UCX ", info->version, ", moves memory of type ",
                      absl::StrJoin(info->memory_types, ", "),
                      info->device_memory ? " (CUDA memory: yes)" : " (CUDA memory: no)");
}

bool rdma_device_present() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/class/infiniband", ec)) {
    (void)entry;
    return true;
  }
  return false;
}

}  // namespace weft::transport::ucx
