// Who gets into the rendezvous: a connection sends its hello, answers the challenge with
// proof of the job secret, and then takes its rank's place in the table, or is refused with
// a reason it is sent (another version or job, a wrong size or rank) or dropped unanswered
// (a stranger). The server loop that drives these is in rendezvous_server.cc.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/launch_env.hpp"
#include "src/base/peer_info.hpp"
#include "src/rendezvous_server_impl.hpp"

namespace weft {

void RendezvousServer::Impl::read_hello(Conn& c) {
  while (c.in.size() < c.need) {
    char buf[16384];
    const size_t want = std::min(sizeof(buf), c.need - c.in.size());
    const ssize_t n = recv(c.fd.get(), buf, want, 0);
    if (n == 0) return drop(c, "a truncated hello", "closed before sending a complete hello", false);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return drop(c, "a truncated hello", absl::StrCat("read failed: ", std::strerror(errno)), false);
    }
    c.in.append(buf, static_cast<size_t>(n));
    if (c.need == wire::kHelloHeaderBytes && c.in.size() == wire::kHelloHeaderBytes) {
      // The header alone decides whether this is a weft rank and how much more to read.
      auto need = wire::hello_length(c.in);
      if (!need.ok()) return drop(c, "not a weft hello", std::string(need.status().message()), true);
      c.need = *need;
    }
  }
  handle_hello(c);
}

// Another version or job is told so at once (neither is a secret); anything else must prove
// the job secret before the server looks further.
void RendezvousServer::Impl::handle_hello(Conn& c) {
  c.hello = std::exchange(c.in, std::string());
  const wire::Hello h = wire::parse_hello_header(c.hello);
  const std::string who = absl::StrCat("rank ", h.rank, " (", c.peer, ")");
  if (h.version != wire::kProtocolVersion) {
    return refuse(c, absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(who, " speaks bootstrap protocol ", h.version, " but the "
                               "rendezvous speaks ", wire::kProtocolVersion,
                               "; run the same weft version on every rank"));
  }
  if (h.job_id != job_id_) {
    return refuse(c, absl::StatusCode::kFailedPrecondition,
                  absl::StrFormat("%s brought job id %016x but the rendezvous at %s serves job "
                                  "%016x; that rank has a unique id (or WEFT_COORDINATOR) from "
                                  "another job", who, h.job_id, address_.to_string(), job_id_));
  }
  const Nonce nonce = fresh_nonce();
  auto challenge = std::make_shared<const std::string>(
      wire::encode_challenge(nonce, wire::server_proof(secret_, c.hello, nonce)));
  c.expected = wire::rank_proof(secret_, c.hello, *challenge);
  c.out = std::move(challenge);
  c.sent = 0;
  c.state = Conn::State::kChallenging;
  flush(c);
}

void RendezvousServer::Impl::read_proof(Conn& c) {
  while (c.in.size() < c.need) {
    char buf[sizeof(Proof)];
    const ssize_t n = recv(c.fd.get(), buf, c.need - c.in.size(), 0);
    if (n == 0) return drop(c, "a truncated proof", "closed instead of proving the job secret", false);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return drop(c, "a truncated proof", absl::StrCat("read failed: ", std::strerror(errno)), false);
    }
    c.in.append(buf, static_cast<size_t>(n));
  }
  Proof got{};
  std::memcpy(got.data(), c.in.data(), got.size());
  c.in = std::string();
  if (!same_proof(got, c.expected)) {
    return drop(c, "a wrong proof of the secret", absl::StrCat("its proof of the job secret is wrong (a stranger, a replayed "
                                "handshake, or ", kOtherSecretHint, ")"), true);
  }
  admit(c);
}

void RendezvousServer::Impl::admit(Conn& c) {
  const wire::Hello h = wire::parse_hello_header(c.hello);
  const std::string blob = c.hello.substr(wire::kHelloHeaderBytes);
  c.hello = std::string();
  const std::string who = absl::StrCat("rank ", h.rank, " (", c.peer, ")");
  if (complete_) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " arrived after all ", size_, " ranks had; every process "
                               "needs its own rank (check WEFT_RANK or the launcher)"));
  }
  if (h.size < 1 || h.size > static_cast<uint32_t>(kMaxLaunchSize)) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " says the job has ", h.size, " ranks; sizes run from 1 to ",
                               kMaxLaunchSize));
  }
  // Without a size of its own, the server takes the first valid hello's (ncclGetUniqueId
  // does not know the size either); a refused hello teaches it nothing.
  const uint32_t size = size_ != 0 ? static_cast<uint32_t>(size_) : h.size;
  if (h.size != size) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " says the job has ", h.size, " ranks but the rendezvous at ",
                               address_.to_string(), " serves ", size_, " ranks (set ",
                               size_source_, "); every rank must pass the same size"));
  }
  if (h.rank >= size) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " is not below the job size ", size));
  }
  if (size_ != 0 && by_rank_[h.rank] != nullptr) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, ": rank ", h.rank, " already joined from ",
                               by_rank_[h.rank]->peer, "; every process needs its own rank ",
                               "(check WEFT_RANK or the launcher)"));
  }
  auto info = PeerInfo::decode(blob);
  if (!info.ok() || info->rank != static_cast<int>(h.rank)) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " sent a peer info that ",
                               info.ok() ? absl::StrCat("claims rank ", info->rank)
                                         : std::string(info.status().message())));
  }
  if (size_ == 0) set_size(static_cast<int>(size), absl::StrCat("by the hello of rank ", h.rank));
  c.rank = static_cast<int>(h.rank);
  c.state = Conn::State::kWaiting;
  by_rank_[c.rank] = &c;
  blobs_[c.rank] = blob;
  if (++arrived_ == size_) complete();
}

void RendezvousServer::Impl::refuse(Conn& c, absl::StatusCode code, const std::string& why) {
  refusals_.refused("a hello the rendezvous refused", absl::StrCat("refused ", why));
  c.out = std::make_shared<const std::string>(wire::encode_error_reply(code, why));
  c.state = Conn::State::kReplying;
  flush(c);
}

}  // namespace weft
