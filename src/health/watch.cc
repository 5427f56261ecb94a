#include "src/health/watch.hpp"

#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "src/health/ib_source.hpp"
#include "src/health/nvml_source.hpp"

namespace weft::health {

Watch::~Watch() = default;

absl::StatusOr<std::unique_ptr<Watch>> Watch::open(const Config& config, int rank,
                                                   int local_rank,
                                                   std::vector<std::string> rail_ifnames) {
  std::unique_ptr<Watch> w(new Watch());
  w->config_ = config;
  w->rank_ = rank;
  w->local_rank_ = local_rank;
  w->rail_ifnames_ = std::move(rail_ifnames);
  if (config.nvml_library != "none") {
    auto nvml = std::make_unique<NvmlSource>(config.nvml_library);
    if (absl::Status s = nvml->open(); s.ok()) {
      const size_t gpus = nvml->gpu_bus_ids().size();
      if (gpus > 0) w->gpu_ = local_rank % static_cast<int>(gpus);
      w->nvml_ = std::move(nvml);
    } else if (config.nvml_library != env::kNvmlLibrary.default_value) {
      // The user named a library that does not load: say so (once per process). Without
      // a GPU driver the default simply finds none, which is not worth a line.
      static std::once_flag once;
      std::call_once(once, [&] {
        std::fprintf(stderr, "weft: health: %s\n", std::string(s.message()).c_str());
      });
    }
  }
  w->ib_ = std::make_unique<IbSource>(config.ib_sysfs_root, w->rail_ifnames_,
                                      /*only_rails=*/true);
  auto log = ChangeLog::open(config.health_log, rank);
  if (!log.ok()) return log.status();
  w->log_ = *std::move(log);
  return w;
}

void Watch::describe_self(PeerInfo& self) const {
  if (nvml_ && gpu_ >= 0) self.gpu_bus_id = nvml_->gpu_bus_ids()[gpu_];
  self.rail_ports.assign(rail_ifnames_.size(), "");
  for (const IbPort& p : ib_->ports()) {
    if (p.rail >= 0) self.rail_ports[p.rail] = absl::StrCat(p.device, "/", p.port);
  }
}

absl::Status Watch::start(const std::vector<PeerInfo>& peers, LinkWalker walk,
                          std::function<void(const Change&)> also,
                          std::function<std::string()> route) {
  auto policy = Policy::from_config(config_);
  if (!policy.ok()) return policy.status();
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(std::make_unique<LinkSource>(std::move(walk), rail_ifnames_));
  if (nvml_) {
    // An NVLink reaches a GPU of this host: only ranks here can be at its far end.
    std::vector<std::string> bus_ids(peers.size());
    const std::string& here = peers[rank_].host_id;
    for (size_t r = 0; r < peers.size(); ++r) {
      if (peers[r].host_id == here) bus_ids[r] = peers[r].gpu_bus_id;
    }
    nvml_->set_peers(gpu_, std::move(bus_ids));
    sources.push_back(std::move(nvml_));
  }
  if (!ib_->ports().empty()) sources.push_back(std::move(ib_));
  Monitor::Options options;
  options.rank = rank_;
  options.interval = config_.health_interval;
  options.policy = *std::move(policy);
  options.on_change = [log = log_.get(), also = std::move(also)](const Change& c) {
    log->write(c);
    if (also) also(c);
  };
  monitor_ = std::make_unique<Monitor>(std::move(options), std::move(sources));
  monitor_->start();
  if (config_.health_endpoint_port > 0) {
    // The job runs on without its endpoint: a taken port is no reason to fail a collective.
    auto endpoint =
        Endpoint::start(*monitor_, config_.health_endpoint_address,
                        config_.health_endpoint_port + local_rank_, std::move(route));
    if (endpoint.ok()) {
      endpoint_ = *std::move(endpoint);
    } else {
      std::fprintf(stderr, "weft: health: rank %d: %s\n", rank_,
                   std::string(endpoint.status().message()).c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace weft::health
