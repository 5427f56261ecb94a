// Making a communicator: its transports and the bootstrap through which ranks learn each
// other's addresses, then its topology, the threads that look after its links (the tender,
// the health watch) and the memory its calls use; and a shrunk one from the survivors.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/stream.hpp"
#include "src/comm.hpp"
#include "src/launch_env.hpp"
#include "src/shrink.hpp"
#include "transport/tcp/rails.hpp"

namespace weft::detail {
namespace {

// WEFT_ALGORITHM: "allreduce=ring,broadcast=chain" -> a name per collective.
absl::StatusOr<std::vector<std::string>> parse_forced_algorithms(const std::string& spec) {
  std::vector<std::string> forced(kNumCollectiveKinds);
  if (spec.empty()) return forced;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, '=');
    std::optional<CollectiveKind> kind;
    if (kv.size() == 2) kind = parse_collective(kv[0]);
    if (!kind || find_algorithm(*kind, kv[1]) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WEFT_ALGORITHM: '", std::string(item),
          "' is not collective=algorithm with a known algorithm; `weft info` lists them"));
    }
    forced[static_cast<int>(*kind)] = kv[1];
  }
  return forced;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Comm>> Comm::create(int rank, int size, uint64_t job_id,
                                                   const JobSecret& secret, bool every_rank_here,
                                                   const Exchange& exchange) {
  if (size <= 0 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not within a communicator of ", size, " ranks"));
  }
  warn_about_unknown_env();
  auto config = Config::from_env();
  if (!config.ok()) return config.status();
  auto forced = parse_forced_algorithms(config->algorithm);
  if (!forced.ok()) return forced.status();
  std::unique_ptr<Comm> comm(new Comm(rank, size, *std::move(config)));
  comm->forced_algorithm_ = *std::move(forced);

  transport::TransportInit init;
  init.rank = rank;
  init.size = size;
  init.job_id = job_id;
  init.secret = secret;
  comm->every_rank_here_ = every_rank_here;
  init.socket_ifname = listen_ifname(comm->config_.socket_ifname, every_rank_here);
  init.ring_bytes = comm->config_.shm_ring_bytes;
  init.single_copy_bytes = comm->config_.shm_single_copy_bytes;
  init.checksum = comm->config_.checksum;
  init.path_timeout_ms = comm->config_.path_timeout_ms;
  init.relay_paths = comm->config_.relay_paths;
  init.sockets_per_rail = comm->config_.sockets_per_rail;
  if (const auto& kill = comm->config_.inject_path_kill; kill && kill->rank == rank) {
    init.faults.kill_peer = kill->peer;
    init.faults.kill_at = kill->at;
    init.faults.kill_header_bytes = kill->header_bytes;
  }
  init.faults.corrupt_rate = comm->config_.inject_corrupt_rate;
  for (const auto& [to, from] : comm->config_.inject_corrupt_links) {
    if (to == rank) init.faults.corrupt_peers.push_back(from);
  }
  if (!comm->config_.inject_corrupt_links.empty() && init.faults.corrupt_peers.empty()) {
    init.faults.corrupt_rate = 0;  // the named links are other ranks'
  }
  PeerInfo self;
  self.rank = rank;
  self.pid = getpid();
  self.host_id = local_host_id();
  // The rails by interface name, so the monitor numbers a tcp rail and the InfiniBand port
  // under it alike, and a rail isolated by number is found on every link; a bad
  // WEFT_SOCKET_IFNAME is the tcp transport's error to report.
  if (auto rails = transport::tcp::choose_rails(init.socket_ifname); rails.ok()) {
    for (const auto& r : *rails) comm->rail_ifnames_.push_back(r.ifname);
  }
  if (comm->config_.health) {
    auto watch = comm->open_watch();
    if (!watch.ok()) return watch.status();
    comm->watch_ = *std::move(watch);
    comm->watch_->describe_self(self);
  }
  if (!comm->config_.socket_ifname.empty()) init.rail_ifnames = comm->rail_ifnames_;
  // In order of preference. ucx is made where it is forced or could reach an RDMA device:
  // over plain Ethernet tcp is the default, and a UCX context costs its setup for nothing.
  for (const char* name : {"shm", "ucx", "tcp"}) {
    const bool forced = comm->config_.transport == name;
    if (std::string_view(name) == "ucx" && !forced &&
        !(comm->config_.transport == "auto" && transport::ucx_wanted_by_default())) {
      continue;
    }
    transport::TransportInit own = init;
    own.forced = forced;
    auto t = transport::make_transport(name, own);
    if (!t.ok()) return t.status();
    self.addresses.emplace_back(name, (*t)->address());
    comm->transports_.push_back(*std::move(t));
  }
  transport::TransportInit control = init;
  control.job_id = job_id ^ kControlJobSalt;
  control.refused_means_gone = true;
  control.single_rail = true;
  control.faults = {};  // injected faults are the data links'
  control.blame = &comm->blame_;
  comm->control_init_ = control;
  auto control_transport = transport::make_transport("tcp", control);
  if (!control_transport.ok()) return control_transport.status();
  self.addresses.emplace_back(kControlAddress, (*control_transport)->address());
  comm->control_ = *std::move(control_transport);
  comm->job_id_ = job_id;
  comm->secret_ = secret;

  auto peers = exchange(self);
  if (!peers.ok()) return peers.status();
  if (peers->size() != static_cast<size_t>(size)) {
    return absl::InternalError(absl::StrCat("bootstrap returned ", peers->size(),
                                            " peers for a communicator of ", size));
  }
  std::vector<transport::Transport*> by_preference;
  for (auto& t : comm->transports_) by_preference.push_back(t.get());
  auto topology = Topology::build(rank, *peers, by_preference, comm->config_.transport);
  if (!topology.ok()) return topology.status();
  comm->topology_ = *std::move(topology);
  for (auto& t : comm->transports_) t->learn_peers(*peers);
  comm->route_ = Route(comm->topology_.peers());
  comm->route_history_.record(comm->route_, "", absl::Now());
  comm->shm_only_ = comm->topology_.every_link_over("shm");
  // Ranks of one communicator in one process (threads as ranks, as tests have them) share a
  // CUDA context and its hardware queues: a stream's wait for one rank's piece could hold
  // the copy in of another rank's, which that very collective waits for. Their calls on
  // device buffers return once done, over the copier's own stream with no stream waits.
  // (Ranks in other processes have contexts of their own, which the GPU time-slices;
  // tests/gpu/stream_ordered_test runs two on one GPU.)
  const PeerInfo& mine = (*peers)[rank];
  for (const PeerInfo& p : *peers) {
    if (p.rank != rank && p.host_id == mine.host_id && p.pid == mine.pid) comm->gpu_shared_ = true;
  }
  // Cores of the machine, not of this process: mpirun binds each rank to its own core, and
  // ranks bound to distinct cores are not oversubscribed. Ranks in other namespaces of this
  // machine (a virtual cluster's hosts) compete for the same cores.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const std::string_view machine = machine_of(self.host_id);
  const auto on_this_machine = std::count_if(peers->begin(), peers->end(), [&](const PeerInfo& p) {
    return machine_of(p.host_id) == machine;
  });
  Backoff::set_oversubscribed(on_this_machine > (cores > 0 ? cores : 1));
  comm->links_.resize(size);
  comm->used_.resize(size);
  comm->used_peers_.reserve(size);
  comm->failed_connects_.reset(new transport::LinkCounter[size]);
  // Links whose protocol runs on after a call (tcp's acknowledgements and resumptions, the
  // sends ucx leaves under way) are tended between calls; shm's rings need nothing.
  bool any_tended = false;
  for (int peer = 0; peer < size; ++peer) {
    const transport::Transport* t = peer == rank ? nullptr : comm->topology_.transport_to(peer);
    any_tended |= t != nullptr && t->name() != "shm";
  }
  if (any_tended) {
    Comm* c = comm.get();
    comm->tender_ = std::make_unique<LinkTender>(&comm->calls_mu_, [c] {
      MutexLock lock(&c->links_mu_);
      const bool outstanding = c->tend_links();
      if (!c->config_.inject_file.empty()) c->apply_inject_file();
      return outstanding;
    });
  }
  if (comm->watch_) {
    Waiter::set_stall_after(comm->config_.timeout * comm->config_.health_stall_fraction);
    Comm* c = comm.get();
    auto walk = [c](absl::FunctionRef<void(const health::LinkView&)> visit) {
      c->walk_links(visit);
    };
    std::function<void(const health::Change&)> judged;
    if (comm->config_.isolate) {
      Isolation::Options o;
      o.rank = rank;
      o.quiet = comm->config_.isolate_quiet;
      o.probation = comm->config_.health_recover;
      for (int peer = 0; peer < size; ++peer) {
        const transport::Transport* t = peer == rank ? nullptr : comm->topology_.transport_to(peer);
        o.link_device.emplace_back(t != nullptr ? t->name() : "");
        if (peer != rank && (*peers)[peer].host_id == self.host_id) o.host_peers.push_back(peer);
      }
      // A call under way on a link just judged FAILING goes on through a third rank, so that
      // the call ends, and with it the wait for the next one to adopt the isolation.
      o.failing = [c](int peer) { c->detour(peer, true); };
      comm->isolation_ = std::make_unique<Isolation>(
          std::move(o), [c](const health::Change& change) { c->watch_->monitor()->record(change); });
      judged = [iso = comm->isolation_.get()](const health::Change& change) { iso->judged(change); };
    }
    auto route = [c] { return c->route_history_.json(); };
    if (absl::Status s = comm->watch_->start(*peers, walk, std::move(judged), route); !s.ok()) {
      return s;
    }
  }

  // The relay is allocated and touched once here, never on the data path.
  comm->relay_bytes_ = comm->config_.relay_bytes - comm->config_.relay_bytes % 8;
  comm->relay_.reset(new (std::nothrow) std::byte[comm->relay_bytes_]);
  if (comm->relay_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rank ", rank, ": cannot allocate the relay, WEFT_RELAY_BYTES=", comm->relay_bytes_,
        " bytes; lower WEFT_RELAY_BYTES or free memory"));
  }
  std::memset(comm->relay_.get(), 0, comm->relay_bytes_);
  comm->stream_block_.reset(new std::byte[kStreamBlockBytes]);
  std::memset(comm->stream_block_.get(), 0, kStreamBlockBytes);
  {
    // Zeroed before it is built, so that no call faults its pages in.
    void* raw = ::operator new(sizeof(DirectExchange));
    std::memset(raw, 0, sizeof(DirectExchange));
    comm->direct_.reset(new (raw) DirectExchange);
  }
  return comm;
}

absl::StatusOr<std::unique_ptr<Comm>> Comm::shrink(absl::Duration timeout,
                                                   std::vector<int>* dropped) {
  // Calls queued on streams end first (after a failure they only let their streams go on).
  stop_engine(/*may_abort=*/false);
  // The survivors' communicator watches its own links, and serves the endpoint's port.
  watch_.reset();
  if (timeout <= absl::ZeroDuration()) timeout = config_.timeout;
  // The data links may hold half a collective; nothing travels on them again, and peers
  // still waiting on them learn at once that this rank has moved on.
  if (!failed_.load(std::memory_order_acquire)) {
    fail(absl::FailedPreconditionError(
        absl::StrCat("rank ", rank_, " shrank this communicator; use the new one")));
  }
  ShrinkAgreement agreement(rank_, topology_.peers(), *control_, control_init_, job_id_);
  auto outcome = agreement.agree(timeout);
  if (!outcome.ok()) return outcome.status();
  const Deadline deadline = Deadline::after(timeout);
  auto comm = Comm::create(outcome->rank, outcome->size, outcome->job_id, secret_, every_rank_here_,
                           [&](const PeerInfo& self) { return agreement.exchange(self, deadline); });
  if (!comm.ok()) return comm.status();
  if (dropped != nullptr) *dropped = outcome->dropped;
  return comm;
}

}  // namespace weft::detail
