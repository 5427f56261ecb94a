// weft with its health monitor paused, as a Peer: `weft bench --compare health-off` times the
// same communicator's calls with the monitor running (the weft columns) and paused (the
// peer's), block by block in alternating rounds, so that both see the same machine at the
// same moment. Timing whole runs against each other cannot show a 2% cost on a machine whose
// runs differ by several times.
#include "src/comm.hpp"
#include "tools/peer.hpp"

namespace weft::tools {
namespace {

// The bench runs blocks of calls, each ended by its library's settle() (untimed), weft's and
// the peer's in turn. weft's ends by pausing the monitor for the peer's block; the peer's
// ends by resuming it for weft's. Pausing and resuming never fall inside a timed block.
class MonitorSwitch : public Peer {
 public:
  MonitorSwitch(std::unique_ptr<Peer> calls, health::Monitor& monitor, bool pause_after,
                const char* name)
      : calls_(std::move(calls)), monitor_(monitor), pause_after_(pause_after), name_(name) {}
  ~MonitorSwitch() override { monitor_.set_paused(false); }

  const char* name() const override { return name_; }
  bool supports(const Call& call) const override { return calls_->supports(call); }
  absl::Status run(const Call& call, const Placement& at) override {
    return calls_->run(call, at);
  }
  absl::Status finish() override { return calls_->finish(); }
  absl::Status settle() override {
    monitor_.set_paused(pause_after_);
    return calls_->settle();
  }

 private:
  std::unique_ptr<Peer> calls_;
  health::Monitor& monitor_;
  const bool pause_after_;
  const char* name_;
};

}  // namespace

absl::StatusOr<HealthSwitchedPeers> make_health_switched_peers(Communicator& comm,
                                                              DeviceMirror* mirror) {
  health::Monitor* monitor = comm.impl().health();
  if (monitor == nullptr) {
    return absl::FailedPreconditionError(
        "--compare health-off needs the health monitor running: unset WEFT_HEALTH=off");
  }
  HealthSwitchedPeers p;
  p.on = std::make_unique<MonitorSwitch>(make_weft_peer(comm, mirror), *monitor, true, "weft");
  p.off = std::make_unique<MonitorSwitch>(make_weft_peer(comm, mirror), *monitor, false, "health-off");
  return p;
}

}  // namespace weft::tools
