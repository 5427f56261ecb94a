// weft as a Peer: each call goes straight to the Communicator, with option structs built
// once so the timed path allocates nothing; with --memory device, each is ordered on the
// mirror's stream, and finish() waits for the stream and asks for failures after returning.
#include "tools/peer.hpp"

namespace weft::tools {
namespace {

class WeftPeer : public Peer {
 public:
  WeftPeer(Communicator& comm, DeviceMirror* mirror) : comm_(comm), mirror_(mirror) {
    void* stream = mirror != nullptr ? mirror->stream() : nullptr;
    allreduce_.stream = allgather_.stream = reduce_scatter_.stream = broadcast_.stream = stream;
  }

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

  absl::Status finish() override {
    if (mirror_ == nullptr) return absl::OkStatus();
    if (absl::Status s = mirror_->synchronize(); !s.ok()) return s;
    return comm_.async_error();
  }

 private:
  Communicator& comm_;
  DeviceMirror* mirror_;
  AllreduceOptions allreduce_;
  AllgatherOptions allgather_;
  ReduceScatterOptions reduce_scatter_;
  BroadcastOptions broadcast_;
};

}  // namespace

std::unique_ptr<Peer> make_weft_peer(Communicator& comm, DeviceMirror* mirror) {
  return std::make_unique<WeftPeer>(comm, mirror);
}

}  // namespace weft::tools
