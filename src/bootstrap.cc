#include "src/bootstrap.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "src/base/mutex.hpp"
#include "src/bootstrap_wire.hpp"
#include "src/base/env.hpp"
#include "src/base/job_secret.hpp"
#include "src/launch_env.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/rails.hpp"

namespace weft {

namespace wire = bootstrap_wire;

// ---------------------------------------------------------------------------------------------
// Client: one exchange over a wire::Client (non-blocking calls and poll()), so that every
// wait honours the deadline.

absl::StatusOr<std::vector<PeerInfo>> bootstrap_exchange(const UniqueId& id, int rank, int size,
                                                         const PeerInfo& self, Deadline deadline) {
  auto decoded = decode_unique_id(id);
  if (!decoded.ok()) return decoded.status();
  if (size < 1 || size > kMaxLaunchSize || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap: rank ", rank, " of size ", size, " is impossible; ranks run from 0 to size-1",
        " and size from 1 to ", kMaxLaunchSize));
  }
  if (self.rank != -1 && self.rank != rank) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap: the peer info of rank ", rank,
                                                   " says rank ", self.rank));
  }
  PeerInfo me = self;
  me.rank = rank;
  const std::string blob = me.encode();
  if (blob.size() > kMaxPeerBlobBytes) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap: rank ", rank, "'s peer info is ",
                                                   blob.size(), " bytes, over the limit of ",
                                                   kMaxPeerBlobBytes));
  }
  auto secret = job_secret(decoded->secret);
  if (!secret.ok()) return secret.status();
  wire::Client c{deadline, decoded->address.to_string(), absl::StrCat("rank ", rank, " of ", size),
                 {}};
  if (auto st = c.connect(decoded->address); !st.ok()) return st;
  const std::string hello = wire::encode_hello(decoded->job_id, rank, size, fresh_nonce(), blob);
  if (auto st = c.write_all(hello); !st.ok()) return st;

  auto read_reply_header = [&]() -> absl::StatusOr<uint32_t> {
    char header[wire::kReplyHeaderBytes];
    if (auto st = c.read_exact(header, sizeof(header)); !st.ok()) return st;
    const std::string_view raw(header, sizeof(header));
    const wire::ReplyHeader reply = wire::parse_reply_header(raw);
    if (!reply.magic_ok) {
      return absl::UnavailableError(absl::StrCat(
          c.who, ": ", c.where, " is not a weft rendezvous (it answered ",
          wire::hex_prefix(raw, 8), "); check the unique id or WEFT_COORDINATOR's port"));
    }
    return reply.code;
  };
  auto first = read_reply_header();
  if (!first.ok()) return first.status();
  uint32_t code = *first;
  if (code == wire::kChallengeCode) {
    // The server proves it knows the secret before this rank says anything more.
    std::string challenge(wire::kChallengeBytes, '\0');
    std::memcpy(challenge.data(), wire::kMagic, 4);
    std::memcpy(challenge.data() + 4, &code, 4);
    if (auto st = c.read_exact(challenge.data() + wire::kReplyHeaderBytes,
                               challenge.size() - wire::kReplyHeaderBytes);
        !st.ok()) {
      return st;
    }
    Nonce server_nonce{};
    Proof server_claim{};
    std::memcpy(server_nonce.data(), challenge.data() + wire::kReplyHeaderBytes, 16);
    std::memcpy(server_claim.data(), challenge.data() + wire::kReplyHeaderBytes + 16, 32);
    if (!same_proof(server_claim, wire::server_proof(*secret, hello, server_nonce))) {
      return absl::PermissionDeniedError(absl::StrCat(
          c.who, ": the rendezvous at ", c.where, " could not prove it knows the job secret: "
          "a stranger holds that address, or ", kOtherSecretHint));
    }
    const Proof answer = wire::rank_proof(*secret, hello, challenge);
    if (auto st = c.write_all(as_text(answer)); !st.ok()) return st;
    auto next = read_reply_header();
    if (!next.ok()) return next.status();
    code = *next;
  }
  if (code != 0) {
    auto len = c.read_u32();
    if (!len.ok()) return len.status();
    std::string why(std::min(*len, wire::kMaxMessageBytes), '\0');
    if (auto st = c.read_exact(why.data(), why.size()); !st.ok()) return st;
    const auto status_code = code <= 16 ? static_cast<absl::StatusCode>(code)
                                        : absl::StatusCode::kUnknown;
    return absl::Status(status_code, absl::StrCat(c.who, ": ", why));
  }
  auto count = c.read_u32();
  if (!count.ok()) return count.status();
  if (*count != static_cast<uint32_t>(size)) {
    return absl::UnavailableError(absl::StrCat(c.who, ": the rendezvous at ", c.where,
                                               " sent a table of ", *count, " ranks"));
  }
  std::vector<PeerInfo> table;
  table.reserve(size);
  for (int r = 0; r < size; ++r) {
    auto len = c.read_u32();
    if (!len.ok()) return len.status();
    if (*len > kMaxPeerBlobBytes) {
      return absl::UnavailableError(absl::StrCat(c.who, ": the rendezvous sent a ", *len,
                                                 "-byte peer info for rank ", r));
    }
    std::string b(*len, '\0');
    if (auto st = c.read_exact(b.data(), b.size()); !st.ok()) return st;
    auto info = PeerInfo::decode(b);
    if (!info.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(c.who, ": peer info of rank ", r, ": ",
                                                     info.status().message()));
    }
    if (info->rank != r) {
      return absl::UnavailableError(absl::StrCat(c.who, ": the rendezvous table has rank ",
                                                 info->rank, " in slot ", r));
    }
    table.push_back(std::move(*info));
  }
  return table;
}

namespace {

// Where rank 0 serves a WEFT_COORDINATOR rendezvous that `host_port` resolves to `resolved`
// on this host: on one address only, so that no other network this host is on can reach it.
// A loopback coordinator is a single-host job and is served where it points. Otherwise the
// address belongs to WEFT_SOCKET_IFNAME's interface when one is named (the interface the tcp
// links use too), else to whichever interface holds the resolved address.
absl::StatusOr<RendezvousAddress> coordinator_listen_address(const std::string& host_port,
                                                             const RendezvousAddress& resolved,
                                                             const std::string& socket_ifname) {
  if (resolved.is_loopback()) return resolved;
  transport::tcp::SockAddr as_socket;
  as_socket.len = resolved.to_sockaddr(as_socket.storage);
  auto holder = transport::tcp::interface_holding(as_socket);
  if (!holder.ok()) return holder.status();
  if (socket_ifname.empty()) {
    if (!holder->empty()) return resolved;
    return absl::FailedPreconditionError(absl::StrCat(
        "it resolves to ", resolved.to_string(), ", which is not an address of this host; set "
        "WEFT_SOCKET_IFNAME to the interface the other ranks reach rank 0 through, or give "
        "WEFT_COORDINATOR an address of rank 0's host"));
  }
  if (*holder == socket_ifname) return resolved;
  auto ip = transport::tcp::choose_listen_ip(socket_ifname);
  if (!ip.ok()) return ip.status();
  auto sa = transport::tcp::make_sockaddr(*ip, resolved.port);
  if (!sa.ok()) return sa.status();
  auto chosen = RendezvousAddress::from_sockaddr(sa->get(), sa->len);
  if (!chosen.ok()) return chosen.status();
  // A warning, not an error: the other ranks dial what the name resolves to on their hosts,
  // which may differ from here (a name mapped to another interface in /etc/hosts).
  const std::string here = holder->empty() ? std::string("not an address of this host")
                                           : absl::StrCat("an address of ", *holder);
  std::fprintf(stderr,
               "weft: warning: WEFT_COORDINATOR=%s resolves here to %s (%s), but rank 0 serves "
               "the rendezvous only on %s, the address of WEFT_SOCKET_IFNAME=%s; the other ranks "
               "find it only if the name resolves to that address on their hosts (else give "
               "WEFT_COORDINATOR that address)\n",
               host_port.c_str(), resolved.to_string().c_str(), here.c_str(),
               chosen->to_string().c_str(), socket_ifname.c_str());
  return chosen;
}

}  // namespace

absl::StatusOr<std::vector<PeerInfo>> bootstrap_from_coordinator(const std::string& host_port,
                                                                 const std::string& socket_ifname,
                                                                 int rank, int size,
                                                                 const PeerInfo& self,
                                                                 Deadline deadline) {
  auto id = unique_id_for_coordinator(host_port);
  if (!id.ok()) return id.status();
  return bootstrap_from_coordinator(host_port, *id, socket_ifname, rank, size, self, deadline);
}

absl::StatusOr<std::vector<PeerInfo>> bootstrap_from_coordinator(const std::string& host_port,
                                                                 UniqueId id,
                                                                 const std::string& socket_ifname,
                                                                 int rank, int size,
                                                                 const PeerInfo& self,
                                                                 Deadline deadline) {
  std::unique_ptr<RendezvousServer> server;
  if (rank == 0) {
    auto decoded = decode_unique_id(id);
    if (!decoded.ok()) return decoded.status();
    auto cannot_serve = [&](const absl::Status& why) {
      return absl::Status(why.code(), absl::StrCat("rank 0 cannot serve WEFT_COORDINATOR=",
                                                   host_port, ": ", why.message()));
    };
    auto bind_address = coordinator_listen_address(host_port, decoded->address, socket_ifname);
    if (!bind_address.ok()) return cannot_serve(bind_address.status());
    auto secret = job_secret(decoded->secret);
    if (!secret.ok()) return secret.status();
    auto started = RendezvousServer::start(*bind_address, decoded->job_id, *secret, size, deadline);
    if (!started.ok()) return cannot_serve(started.status());
    server = std::move(*started);
    // Rank 0 meets the others where its server listens, which may not be where the name
    // resolves to on this host (see coordinator_listen_address).
    id = encode_unique_id(server->address(), decoded->job_id, decoded->secret);
  }
  auto table = bootstrap_exchange(id, rank, size, self, deadline);
  // Rank 0 keeps serving until every rank has its table (bounded by the deadline); the
  // server logs any rank it could not serve, and this rank's own result stands.
  if (server != nullptr && table.ok()) server->wait().IgnoreError();
  return table;
}

// ---------------------------------------------------------------------------------------------
// make_unique_id: the caller's process serves the rendezvous until it completes or times out.

namespace {

// Servers started by make_unique_id, reaped as they finish. At exit the destructor stops
// and joins those still running (each stops within one poll wake-up). A forked child must not:
// the threads are not its own and the wake-up eventfd is shared with the parent, so it
// leaves them alone.
struct Registry {
  const pid_t pid = getpid();
  Mutex mu;
  std::vector<std::unique_ptr<RendezvousServer>> servers ABSL_GUARDED_BY(mu);

  ~Registry() {
    MutexLock lock(&mu);
    if (getpid() != pid) {
      for (auto& s : servers) (void)s.release();
    }
    servers.clear();
  }
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

absl::StatusOr<UniqueId> make_unique_id() {
  auto config = Config::from_env();
  if (!config.ok()) return config.status();
  // mpirun's rank 0 (create_from_mpi) serves ranks that the launcher may place on this host
  // alone: then only loopback needs to reach the rendezvous.
  auto ip = transport::tcp::choose_listen_ip(
      listen_ifname(config->socket_ifname, launcher_puts_every_rank_here(0)));
  if (!ip.ok()) return ip.status();
  auto sa = transport::tcp::make_sockaddr(*ip, 0);
  if (!sa.ok()) return sa.status();
  auto bind_address = RendezvousAddress::from_sockaddr(sa->get(), sa->len);
  if (!bind_address.ok()) return bind_address.status();
  const uint64_t job_id = random_job_id();
  const JobSecret in_id = fresh_secret();
  auto secret = job_secret(in_id);  // WEFT_JOB_SECRET, when set, replaces the id's
  if (!secret.ok()) return secret.status();
  // Size 0: like ncclGetUniqueId, the caller does not say how many ranks will come.
  auto server = RendezvousServer::start(*bind_address, job_id, *secret, 0,
                                        Deadline::after(config->timeout));
  if (!server.ok()) return server.status();
  const UniqueId id = encode_unique_id((*server)->address(), job_id, in_id);
  Registry& reg = registry();
  MutexLock lock(&reg.mu);
  std::erase_if(reg.servers, [](const auto& s) { return s->done(); });
  reg.servers.push_back(std::move(*server));
  return id;
}

}  // namespace weft
