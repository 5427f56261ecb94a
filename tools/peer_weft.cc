// weft as a Peer: each call goes straight to the Communicator, with option structs built
// once so the timed path allocates nothing.
#include "tools/peer.hpp"

namespace weft::tools {
namespace {

class WeftPeer : public Peer {
 public:
  explicit WeftPeer(Communicator& comm) : comm_(comm) {}

  const char* name() const override { return "weft"; }
  bool supports(const Call&) const override { return true; }

  absl::Status run(const Call& call, const Placement& at) override {
    switch (call.kind) {
      case CollectiveKind::kAllreduce:
        allreduce_.op = call.op;
        return comm_.allreduce(at.send, at.recv, call.count, call.type, allreduce_);
      case CollectiveKind::kAllgather:
        return comm_.allgather(at.send, at.recv, call.count, call.type, allgather_);
      case CollectiveKind::kReduceScatter:
        reduce_scatter_.op = call.op;
        return comm_.reduce_scatter(at.send, at.recv, call.count, call.type, reduce_scatter_);
      case CollectiveKind::kBroadcast:
        broadcast_.root = call.root;
        return comm_.broadcast(at.send, at.recv, call.count, call.type, broadcast_);
      default:
        return absl::InvalidArgumentError("weft bench: the barrier has no buffers to check");
    }
  }

 private:
  Communicator& comm_;
  AllreduceOptions allreduce_;
  AllgatherOptions allgather_;
  ReduceScatterOptions reduce_scatter_;
  BroadcastOptions broadcast_;
};

}  // namespace

std::unique_ptr<Peer> make_weft_peer(Communicator& comm) {
  return std::make_unique<WeftPeer>(comm);
}

}  // namespace weft::tools
