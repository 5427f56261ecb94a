// The public C++ API: thin wrappers that turn calls into CollectiveArgs for detail::Comm.
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "src/bootstrap.hpp"
#include "src/comm.hpp"
#include "src/health_api.hpp"
#include "src/base/env.hpp"
#include "src/launch_env.hpp"
#include "src/unique_id.hpp"
#include "weft/weft.hpp"

namespace weft {
namespace {

// Runs `body`, which returns a StatusOr, so that no exception leaves the library: creating a
// communicator allocates (tables, strings, threads) and an allocation may fail.
template <typename Body>
auto guarded(const char* what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": out of memory; lower WEFT_RELAY_BYTES or WEFT_SHM_RING_BYTES, "
                           "or free memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

Deadline bootstrap_deadline() {
  auto config = Config::from_env();
  return Deadline::after(config.ok() ? config->timeout : absl::Seconds(300));
}

}  // namespace

Communicator::Communicator(std::unique_ptr<detail::Comm> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::create(const UniqueId& id, int rank,
                                                                   int size) {
  return guarded("weft::Communicator::create", [&] { return create_unguarded(id, rank, size); });
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::create_unguarded(const UniqueId& id,
                                                                             int rank, int size) {
  auto decoded = decode_unique_id(id);
  if (!decoded.ok()) return decoded.status();
  auto secret = job_secret(decoded->secret);
  if (!secret.ok()) return secret.status();
  const Deadline deadline = bootstrap_deadline();
  // Ranks that all met rank 0 on loopback, or that the launcher placed on this host, need
  // no listener on a network.
  const bool every_rank_here =
      decoded->address.is_loopback() || launcher_puts_every_rank_here(size);
  auto comm = detail::Comm::create(rank, size, decoded->job_id, *secret, every_rank_here,
                                   [&](const PeerInfo& self) {
                                     return bootstrap_exchange(id, rank, size, self, deadline);
                                   });
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<Communicator>(new Communicator(*std::move(comm)));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::create_from_env() {
  return guarded("weft::Communicator::create_from_env", [] { return create_from_env_unguarded(); });
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::create_from_env_unguarded() {
  auto launch = read_launch_info();
  if (!launch.ok()) return launch.status();
  if (launch->coordinator.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", launch->rank, " of ", launch->size, " (from ", launch->launcher,
        "): set WEFT_COORDINATOR=host:port (rank 0's host and a free port) so ranks can meet, "
        "or build the communicator from MPI (weft/mpi.hpp) or from a UniqueId"));
  }
  auto id = unique_id_for_coordinator(launch->coordinator);
  if (!id.ok()) return id.status();
  auto decoded = decode_unique_id(*id);
  if (!decoded.ok()) return decoded.status();
  auto secret = job_secret(decoded->secret);
  if (!secret.ok()) return secret.status();
  const Deadline deadline = bootstrap_deadline();
  const int rank = launch->rank, size = launch->size;
  const std::string coordinator = launch->coordinator;
  const std::string socket_ifname = env_value(env::kSocketIfname);
  const bool every_rank_here =
      decoded->address.is_loopback() || launcher_puts_every_rank_here(size);
  auto comm = detail::Comm::create(rank, size, decoded->job_id, *secret, every_rank_here,
                                   [&](const PeerInfo& self) {
                                     return bootstrap_from_coordinator(coordinator, *id,
                                                                       socket_ifname, rank, size,
                                                                       self, deadline);
                                   });
  if (!comm.ok()) return comm.status();
  return std::unique_ptr<Communicator>(new Communicator(*std::move(comm)));
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
int Communicator::local_rank() const { return impl_->topology().local_rank(); }
int Communicator::local_size() const { return impl_->topology().local_size(); }

namespace {
CollectiveArgs make_args(CollectiveKind kind, const void* send, void* recv, size_t count,
                         DataType type) {
  CollectiveArgs a;
  a.kind = kind;
  a.send = static_cast<const std::byte*>(send);
  a.recv = static_cast<std::byte*>(recv);
  a.count = count;
  a.type = type;
  return a;
}
}  // namespace

absl::Status Communicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                                     const AllreduceOptions& options) {
  CollectiveArgs a = make_args(CollectiveKind::kAllreduce, send, recv, count, type);
  a.op = options.op;
  return impl_->run(a, options);
}

absl::Status Communicator::allgather(const void* send, void* recv, size_t send_count,
                                     DataType type, const AllgatherOptions& options) {
  CollectiveArgs a = make_args(CollectiveKind::kAllgather, send, recv, send_count, type);
  return impl_->run(a, options);
}

absl::Status Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                          DataType type, const ReduceScatterOptions& options) {
  CollectiveArgs a = make_args(CollectiveKind::kReduceScatter, send, recv, recv_count, type);
  a.op = options.op;
  return impl_->run(a, options);
}

absl::Status Communicator::broadcast(const void* send, void* recv, size_t count, DataType type,
                                     const BroadcastOptions& options) {
  CollectiveArgs a = make_args(CollectiveKind::kBroadcast, send, recv, count, type);
  a.root = options.root;
  return impl_->run(a, options);
}

absl::Status Communicator::barrier(const BarrierOptions& options) {
  CollectiveArgs a = make_args(CollectiveKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8);
  return impl_->run(a, options);
}

std::vector<LinkStats> Communicator::link_stats() const { return impl_->link_stats(); }

std::vector<LinkHealth> Communicator::health() const { return detail::health_of(impl_->health()); }

std::optional<HealthChange> Communicator::next_health_change() {
  return detail::next_change_of(impl_->health());
}

void Communicator::abort() { impl_->abort(); }

absl::Status Communicator::async_error() const { return impl_->async_error(); }

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::shrink(std::vector<int>* dropped,
                                                                   const ShrinkOptions& options) {
  return guarded("weft::Communicator::shrink",
                 [&]() -> absl::StatusOr<std::unique_ptr<Communicator>> {
                   auto comm = impl_->shrink(options.timeout, dropped);
                   if (!comm.ok()) return comm.status();
                   return std::unique_ptr<Communicator>(new Communicator(*std::move(comm)));
                 });
}

}  // namespace weft
