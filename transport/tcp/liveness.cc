#include "transport/tcp/liveness.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/base/deadline.hpp"
#include "transport/tcp/address.hpp"

namespace weft::transport::tcp {
namespace {

// One query in flight: connect, send the hello, read the ack.
struct Query {
  PeerAnswer answer;
  int fd = -1;
  HelloWire hello{};
  Handshake asked;
  size_t sent = 0;
  AckWire ack{};
  size_t got = 0;
  bool done = false;

  void finish(PeerAnswer::Outcome outcome, std::string detail = "") {
    answer.outcome = outcome;
    answer.detail = std::move(detail);
    done = true;
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

void start(Query& q, const TransportInit& init, const SockAddr& to) {
  q.asked.job_id = init.job_id, q.asked.from_rank = init.rank;
  q.asked.to_rank = static_cast<uint32_t>(q.answer.rank), q.asked.size = init.size;
  q.asked.verdict = kQuery, q.asked.nonce = fresh_nonce();
  q.hello = encode_hello(q.asked);
  q.fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (q.fd < 0) return q.finish(PeerAnswer::kUnknown, absl::StrCat("socket: ", std::strerror(errno)));
  if (::connect(q.fd, to.get(), to.len) != 0 && errno != EINPROGRESS) {
    return q.finish(PeerAnswer::kGone, absl::StrCat("connect: ", std::strerror(errno)));
  }
}

// Moves a query on without blocking.
void advance(Query& q, const TransportInit& init) {
  if (q.sent < q.hello.size()) {
    const ssize_t n = ::send(q.fd, q.hello.data() + q.sent, q.hello.size() - q.sent, MSG_NOSIGNAL);
    if (n > 0) q.sent += static_cast<size_t>(n);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return q.finish(PeerAnswer::kGone, std::strerror(errno));  // refused, reset
    }
    if (q.sent < q.hello.size()) return;
  }
  const ssize_t n = ::recv(q.fd, q.ack.data() + q.got, q.ack.size() - q.got, 0);
  if (n == 0) return q.finish(PeerAnswer::kGone, "closed without an answer");
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      q.finish(PeerAnswer::kGone, std::strerror(errno));
    }
    return;
  }
  q.got += static_cast<size_t>(n);
  if (q.got < q.ack.size()) return;
  const Handshake a = decode_ack(q.ack.data());
  if (a.magic != kHandshakeMagic || a.version != kHandshakeVersion || a.verdict != kAlive ||
      a.job_id != init.job_id || a.from_rank != q.asked.to_rank ||
      a.to_rank != static_cast<uint32_t>(init.rank) ||
      !same_proof(a.proof, listener_proof(init.secret, q.hello, q.ack))) {
    // Whoever holds that port is not the rank: as good as gone.
    return q.finish(PeerAnswer::kGone, "its port answered, but not as that rank");
  }
  q.answer.blame.kind = static_cast<Blame::Kind>(a.rail_count);
  q.answer.blame.rank = static_cast<int>(a.rail) - 1;
  q.finish(PeerAnswer::kAlive);
}

}  // namespace

Blame Blame::unpack(uint64_t v) {
  Blame b;
  b.kind = static_cast<Kind>(v >> 32);
  b.rank = static_cast<int>(static_cast<uint32_t>(v)) - 1;
  return b;
}

std::vector<PeerAnswer> ask_alive(const TransportInit& init,
                                  const std::vector<std::pair<int, std::string>>& peers,
                                  absl::Duration wait) {
  std::vector<PeerAnswer> out(peers.size());
  std::vector<std::pair<size_t, SockAddr>> targets;  // (peer, address): one query each
  for (size_t i = 0; i < peers.size(); ++i) {
    out[i].rank = peers[i].first;
    out[i].outcome = PeerAnswer::kUnknown;
    auto addrs = parse_address_list(peers[i].second);
    if (!addrs.ok()) {
      out[i].outcome = PeerAnswer::kGone;  // it published nothing that can be reached
      out[i].detail = std::string(addrs.status().message());
      continue;
    }
    for (const SockAddr& to : *addrs) targets.emplace_back(i, to);
  }
  std::vector<Query> queries(targets.size());
  for (size_t k = 0; k < targets.size(); ++k) {
    queries[k].answer.rank = out[targets[k].first].rank;
    start(queries[k], init, targets[k].second);
  }
  const Deadline deadline = Deadline::after(wait);
  std::vector<pollfd> fds;
  std::vector<Query*> polled;
  while (!deadline.expired()) {
    fds.clear();
    polled.clear();
    for (Query& q : queries) {
      if (q.done) continue;
      fds.push_back({q.fd, static_cast<short>(q.sent < q.hello.size() ? POLLOUT : POLLIN), 0});
      polled.push_back(&q);
    }
    if (fds.empty()) break;
    if (::poll(fds.data(), fds.size(), std::max(deadline.remaining_ms(), 1)) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) advance(*polled[i], init);
    }
  }
  for (size_t k = 0; k < queries.size(); ++k) {
    Query& q = queries[k];
    if (!q.done) q.finish(PeerAnswer::kSilent, absl::StrCat("no answer within ", absl::FormatDuration(wait)));
    PeerAnswer& best = out[targets[k].first];
    // kAlive < kSilent < kGone < kUnknown: the lowest outcome over the addresses wins.
    if (q.answer.outcome < best.outcome) best = std::move(q.answer);
  }
  return out;
}

AckWire answer_query(const TransportInit& init, const HelloWire& hello, const Handshake& h,
                     Blame blame) {
  Handshake ack;
  ack.job_id = init.job_id, ack.from_rank = static_cast<uint32_t>(init.rank);
  ack.to_rank = h.from_rank, ack.size = init.size, ack.verdict = kAlive;
  ack.rail = static_cast<uint32_t>(blame.rank + 1), ack.rail_count = blame.kind;
  ack.nonce = fresh_nonce();
  AckWire out = encode_ack(ack);
  ack.proof = listener_proof(init.secret, hello, out);
  return encode_ack(ack);
}

}  // namespace weft::transport::tcp
