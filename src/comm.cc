#include "src/comm.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/call_check.hpp"
#include "collectives/stream.hpp"
#include "src/blame.hpp"
#include "src/device/device.hpp"
#include "src/launch_env.hpp"
#include "src/router.hpp"
#include "src/shrink.hpp"
#include "transport/tcp/rails.hpp"

namespace weft::detail {
namespace {

// Holds `mu` for a call's life, or nothing for a null mu. The tender (tcp links only) must
// not touch the links while a call drives them; an shm-only communicator has none, and skips
// the lock: at 8 bytes its call takes ~0.2 us.
struct CallLock {
  Mutex* mu;
  explicit CallLock(Mutex* m) ABSL_NO_THREAD_SAFETY_ANALYSIS : mu(m) {
    if (mu != nullptr) mu->lock();
  }
  ~CallLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (mu != nullptr) mu->unlock();
  }
};

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

Comm::Comm(int rank, int size, Config config)
    : rank_(rank),
      size_(size),
      config_(std::move(config)),
      timeout_ns_(std::max<int64_t>(absl::ToInt64Nanoseconds(config_.timeout), 0)),
      route_history_(rank) {}

Comm::~Comm() {
  // Calls still queued on streams finish first, as NCCL's ncclCommDestroy lets them; past
  // the deadline they are aborted, and their streams let go on.
  stop_engine(/*may_abort=*/true);
  // What the links still owe their peers leaves before they close: the tail of the last
  // call's bytes, which the peer may still be reading, and the acknowledgements of what this
  // rank read. A rank that finished its last call first and left at once would otherwise
  // close a connection under a peer still inside that call (tcp: its link then loses the
  // path and fails the call). Bounded, and skipped after a failure; a peer that closed ends
  // its link's wait at once.
  if (failed_.load(std::memory_order_acquire) || aborted_.load(std::memory_order_relaxed)) return;
  CallLock calls(tender_ != nullptr ? &calls_mu_ : nullptr);
  const Deadline deadline = Deadline::after(absl::Seconds(10));
  Backoff backoff;
  while (tend_links() && !deadline.expired()) backoff.pause();
}

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
  return comm;
}

absl::StatusOr<transport::Pair*> Comm::link(int peer, Deadline deadline) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InternalError(absl::StrCat("rank ", rank_, " asked for a link to ", peer));
  }
  if (links_[peer] == nullptr) {
    auto pair = topology_.transport_to(peer)->connect(topology_.peers()[peer], deadline);
    if (!pair.ok()) {
      failed_connects_[peer].add(1);
      return pair.status();
    }
    MutexLock lock(&links_mu_);
    links_[peer] = *std::move(pair);
    if (!route_.isolated_rails().empty()) use_rails(peer);
    if (route_.isolated().has(rank_, peer)) links_[peer]->detour(true);
  }
  return links_[peer].get();
}

std::vector<LinkStats> Comm::link_stats() const {
  MutexLock lock(&links_mu_);
  std::vector<LinkStats> out;
  for (int peer = 0; peer < size_; ++peer) {
    if (links_[peer] == nullptr) continue;
    const transport::PairStats s = links_[peer]->stats();
    LinkStats l;
    l.peer = peer;
    l.transport = std::string(topology_.transport_to(peer)->name());
    l.bytes_sent = s.bytes_sent, l.bytes_received = s.bytes_received, l.errors = s.errors;
    l.path_failures = s.path_failures, l.resumptions = s.resumptions;
    l.bytes_resent = s.bytes_resent, l.checksum_errors = s.checksum_errors;
    for (auto& p : links_[peer]->paths()) {
      l.paths.push_back({std::move(p.name), p.bytes_sent, p.bytes_received, p.alive,
                         std::move(p.failure)});
    }
    out.push_back(std::move(l));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<health::Watch>> Comm::open_watch() const {
  const auto launch = read_launch_info();
  return health::Watch::open(config_, rank_, launch.ok() ? launch->local_rank : 0, rail_ifnames_);
}

void Comm::walk_links(absl::FunctionRef<void(const health::LinkView&)> visit) const {
  MutexLock lock(&links_mu_);
  for (int peer = 0; peer < size_; ++peer) {
    const uint64_t failed = failed_connects_[peer].get();
    if (links_[peer] == nullptr && failed == 0) continue;
    visit({peer, topology_.transport_to(peer)->name(), links_[peer].get(), failed});
  }
}

absl::Status Comm::validate(const CollectiveArgs& args) const {
  // Named for errors only: this runs on every call.
  const auto what = [&] { return name_of(args.kind); };
  if (failed_.load(std::memory_order_acquire) || aborted_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(absl::StrCat(
        what(), " on rank ", rank_, ": this communicator failed earlier (",
        async_error().message(), "); destroy it and create a new one"));
  }
  if (!is_valid(args.type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": unknown data type ", static_cast<int>(args.type)));
  }
  if (!is_valid(args.op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": unknown reduction op ", static_cast<int>(args.op)));
  }
  if (args.kind == CollectiveKind::kBroadcast && (args.root < 0 || args.root >= size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast: root ", args.root, " is not a rank of 0..", size_ - 1));
  }
  // Allgather and reduce_scatter touch size * count elements of one buffer.
  const bool per_rank = args.kind == CollectiveKind::kAllgather ||
                        args.kind == CollectiveKind::kReduceScatter;
  // A multiplication that must not overflow, not a division: divisions cost ~15 cycles each.
  const size_t unit = args.elem_bytes() * (per_rank ? static_cast<size_t>(size_) : 1);
  size_t bytes = 0;
  if (__builtin_mul_overflow(args.count, unit, &bytes) ||
      bytes > std::numeric_limits<size_t>::max() / 2) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": count ", args.count, " of ",
                                                   name_of(args.type), " overflows a byte count"));
  }
  if (args.count > 0 && args.kind != CollectiveKind::kBarrier) {
    const bool needs_send = args.kind != CollectiveKind::kBroadcast || args.root == rank_;
    if (args.recv == nullptr || (needs_send && args.send == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(what(), " on rank ", rank_, ": ",
                                                     args.recv == nullptr ? "recv" : "send",
                                                     " buffer is null but count is ", args.count));
    }
  }
  return absl::OkStatus();
}

void Comm::apply_inject_file() {
  const absl::Time now = absl::Now();
  if (now < inject_next_) return;
  inject_next_ = now + absl::Milliseconds(500);
  struct stat st {};
  const int64_t stamp = ::stat(config_.inject_file.c_str(), &st) == 0
                            ? static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000007 +
                                  st.st_mtim.tv_nsec + static_cast<int64_t>(st.st_size)
                            : 0;
  if (stamp != inject_stamp_) {
    inject_stamp_ = stamp;
    std::string text;
    if (stamp != 0) {
      std::ifstream in(config_.inject_file);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto parsed = parse_inject_file(text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "weft: rank %d ignores WEFT_INJECT_FILE %s: %s\n", rank_,
                   config_.inject_file.c_str(), std::string(parsed.status().message()).c_str());
      return;
    }
    injected_ = *std::move(parsed);
  }
  // Links opened since the last read get the faults too.
  for (int peer = 0; peer < size_; ++peer) {
    if (links_[peer] == nullptr) continue;
    links_[peer]->inject_corruption(
        corruption_for(injected_, topology_.peers()[peer].address_of("tcp")));
  }
}

bool Comm::tend_links() {
  bool outstanding = false;
  for (auto& link : links_) {
    if (link != nullptr) outstanding |= link->tend();
  }
  return outstanding;
}

absl::Status Comm::with_links(absl::FunctionRef<absl::Status(LinkProvider&)> body) {
  if (absl::Status s = settle(/*copied_out=*/false); !s.ok()) return s;
  if (absl::Status s = async_error(); !s.ok()) return s;
  CallLock calls(tender_ != nullptr ? &calls_mu_ : nullptr);
  TendingScope tending(this);
  return body(*this);
}

absl::Status Comm::run(CollectiveArgs& args, const CallOptions& options) {
  if (absl::Status s = validate(args); !s.ok()) return s;
  const bool device = on_device(args, options);
  if (device && options.stream != nullptr) {
    // Refused at the call, with the communicator still usable.
    if (absl::Status s = open_staging(name_of(args.kind)); !s.ok()) return s;
    if (absl::Status s = staging_->copier().check_stream(options.stream); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(name_of(args.kind), " on rank ", rank_, ": ",
                                                 s.message()));
    }
  }
  if (device && returns_at_once(args, options)) return submit(args, options);
  // Standing in with a NULL stream: the call runs here through the staging buffers, once the
  // calls before have copied their results out of them.
  if (absl::Status s = settle(/*copied_out=*/device); !s.ok()) return s;
  if (device) return run_staged(args, options);
  return run_host(args, options);
}

absl::Status Comm::run_host(CollectiveArgs& args, const CallOptions& options) {
  CallLock calls(tender_ != nullptr ? &calls_mu_ : nullptr);
  TendingScope tending(this);
  const size_t bytes = args.count * args.elem_bytes() *
                       (args.kind == CollectiveKind::kAllgather ? static_cast<size_t>(size_) : 1);
  // Without a per-call name the choice depends only on the kind and the size, and training
  // jobs repeat both: the last choice per kind is kept.
  LastChoice& last = last_choice_[static_cast<int>(args.kind)];
  if (!options.algorithm.empty() || last.algorithm == nullptr || last.bytes != bytes) {
    const std::string& name = options.algorithm.empty()
                                  ? forced_algorithm_[static_cast<int>(args.kind)]
                                  : options.algorithm;
    auto algorithm =
        choose_algorithm(args.kind, name, bytes, size_, config_.small_message_bytes, shm_only_,
                         route_.usable());
    if (!algorithm.ok()) return algorithm.status();
    const auto index = static_cast<uint8_t>(*algorithm - all_algorithms().data());
    if (!options.algorithm.empty()) return run_with(**algorithm, index, args, options);
    last = LastChoice{bytes, *algorithm, index};
  }
  return run_with(*last.algorithm, last.index, args, options);
}

absl::Status Comm::run_with(const Algorithm& chosen, uint8_t index, CollectiveArgs& args,
                            const CallOptions& options) {
  args.deadline = (options.timeout > absl::ZeroDuration() ? Deadline::after(options.timeout)
                                                          : Deadline::after_ns(timeout_ns_))
                      .cancelled_by(&aborted_);
  AlgoContext ctx;
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.schedule = &route_.schedule();
  ctx.links = this;
  ctx.relay = Relay{relay_.get(), relay_bytes_};
  ctx.stream_block = stream_block_.get();
  // Every call, even one with nothing to move, first agrees with the other ranks that they
  // make the same call: in band for the algorithms that move data in the check's pattern,
  // in rounds of its own before the others (collectives/call_check.hpp).
  CallAgreement known;
  known.reference_rank = static_cast<uint32_t>(rank_);
  known.reference = CallSignature::of(calls_++, args, index);
  if (isolation_ != nullptr && isolation_->pending()) {
    known.route = isolation_->proposal(monotonic_now());
  }
  const bool moves_data =
      !args.agree_only && (args.count > 0 || args.kind == CollectiveKind::kBarrier);
  const bool in_band = chosen.carries_agreement && moves_data;
  absl::Status s;
  if (in_band) {
    ctx.agreement = &known;
    s = chosen.run(ctx, args);
  } else {
    s = agree(ctx, known, args.deadline);
  }
  // A rank of the direct exchange took part (calls that differ): it waits for a state from
  // every rank, the rounds' partners or not.
  if (s.ok() && known.direct && !(in_band && chosen.checks_every_rank)) {
    s = trade_states_off_the_rounds(ctx, known, args.deadline);
  }
  if (s.ok()) s = known.verdict();
  // Every rank heard the same proposals and adopts the same change at the same point: before
  // the data moves where the check ran on its own (this very call runs on the new route; a
  // call in progress on a failing link can take seconds), after it where the data rode with
  // the check. The chosen algorithm stays: every rank chose it, and the old links still work.
  if (s.ok() && known.route && !in_band) adopt(*known.route);
  if (s.ok() && !in_band && moves_data) s = chosen.run(ctx, args);
  if (s.ok() && known.route && in_band) adopt(*known.route);
  if (!s.ok()) {
    fail(s);
    if (size_ > 1 && worth_blaming(s) && !aborted_.load(std::memory_order_relaxed)) {
      s = blamed(s);
    }
    return absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", s.message()));
  }
  return s;
}

void Comm::adopt(const RouteChange& change) {
  const std::string line = route_.adopt(change);
  if (isolation_ != nullptr) {
    // A link isolated with no ring around it still carries the ring's traffic: say so.
    const bool stays = !change.on_rail() && change.isolates() && !route_.usable().ring;
    isolation_->adopted(change, monotonic_now(),
                        stays ? "no ring avoids it: it still carries the ring's traffic, "
                                "through a third rank where it can (tcp relay paths)"
                              : "");
  }
  if (line.empty()) return;
  route_history_.record(route_, line, absl::Now());
  switch_ipc_path();
  // The choices cached per kind were made for the links of the last epoch.
  for (LastChoice& last : last_choice_) last = LastChoice{};
  const int a = static_cast<int>(change.a), b = static_cast<int>(change.b);
  if (change.on_rail()) {
    // Our links to the rail's rank, or all of ours when it is ours.
    MutexLock lock(&links_mu_);
    for (int peer = 0; peer < size_; ++peer) {
      if (links_[peer] != nullptr && (a == rank_ || a == peer)) use_rails(peer);
    }
  } else if (a == rank_ || b == rank_) {
    // An isolated link still carries what no ring avoids (the call check, a ring of 3 hosts):
    // through a third rank, not over its failing paths.
    detour(a == rank_ ? b : a, change.isolates());
  }
  // Rank 0 and the change's ends say so: one place to look, and the ranks that judged it.
  if (rank_ == 0 || rank_ == a || (!change.on_rail() && rank_ == b)) {
    std::fprintf(stderr, "weft: rank %d: %s\n", rank_, line.c_str());
  }
}

void Comm::detour(int peer, bool on) {
  MutexLock lock(&links_mu_);
  if (links_[peer] != nullptr) links_[peer]->detour(on);
}

void Comm::use_rails(int peer) {
  // Rails are numbered alike on every rank (WEFT_SOCKET_IFNAME, the same list everywhere).
  for (size_t rail = 0; rail < rail_ifnames_.size(); ++rail) {
    const int r = static_cast<int>(rail);
    const bool out = route_.rail_isolated(rank_, r) || route_.rail_isolated(peer, r);
    links_[peer]->use_rail(rail_ifnames_[rail], !out);
  }
}

absl::Status Comm::blamed(const absl::Status& s) {
  // Long enough for a live rank's listener thread on a loaded host, short beside the deadline
  // that has usually just passed.
  const absl::Duration wait =
      std::clamp(config_.timeout / 10, absl::Milliseconds(200), absl::Seconds(1));
  const Blamed b = blame(s, control_init_, topology_.peers(), wait);
  blame_.store(b.conclusion.pack(), std::memory_order_release);
  MutexLock lock(&failure_mu_);
  failure_ = b.status;
  return b.status;
}

void Comm::fail(const absl::Status& s) {
  {
    MutexLock lock(&failure_mu_);
    failure_ = s;
  }
  failed_.store(true, std::memory_order_release);
  // Closing every link tells all peers at once, not only the ones this rank was waiting
  // on; otherwise ranks further along the ring would wait for their own deadline.
  MutexLock lock(&links_mu_);
  for (auto& l : links_) l.reset();
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

void Comm::abort() { aborted_.store(true, std::memory_order_relaxed); }

absl::Status Comm::async_error() const {
  if (failed_.load(std::memory_order_acquire)) {
    MutexLock lock(&failure_mu_);
    return failure_;
  }
  if (aborted_.load(std::memory_order_relaxed)) {
    return absl::AbortedError(absl::StrCat("rank ", rank_, ": Communicator::abort was called"));
  }
  return absl::OkStatus();
}

}  // namespace weft::detail
