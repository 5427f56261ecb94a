// The harness the transport tests share: ranks of one communicator living in this process,
// each driven from its own thread as a real rank drives its links, and messages whose every
// byte depends on its position, so that a dropped, repeated or reordered byte shows. Every
// loop is bounded by a deadline and an iteration count, so a broken transport fails a test
// instead of hanging it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/base/deadline.hpp"
#include "src/base/job_secret.hpp"
#include "src/base/peer_info.hpp"
#include "transport/transport.hpp"
#include "tests/unit/scoped_env.hpp"
#include "tests/unit/stopwatch.hpp"
#ifdef WEFT_HAVE_UCX
#include "transport/ucx/context.hpp"
#endif

namespace weft::transport {

using MakeTransport = std::function<absl::StatusOr<std::unique_ptr<Transport>>(const TransportInit&)>;

/// One instantiation of the suite: its name, the transport's name and its factory.
struct TransportCase {
  const char* name;
  const char* transport;  ///< what the ranks publish their address under
  MakeTransport make;
  /// Whether the lower rank's connect needs the peer's transport to exist. tcp's does: it
  /// waits for the ack, which the peer's listener sends on arrival (from a thread of its own,
  /// whether or not the peer has called connect yet). shm's lower rank creates both rings and
  /// returns at once; a peer that never comes then shows at the first wait on data. Either
  /// way connects in any order cannot wait on each other in a cycle.
  bool lower_rank_needs_peer_transport = true;
  /// Whether the case runs in a RailNamespace (the ranks' rails are there).
  bool needs_rails = false;
};
inline void PrintTo(const TransportCase& c, std::ostream* os) { *os << c.name; }

inline constexpr absl::Duration kConnectTimeout = absl::Seconds(20);
inline constexpr absl::Duration kTransferTimeout = absl::Seconds(60);
inline constexpr uint64_t kMaxRounds = uint64_t{1} << 28;  // progress loop bound besides the deadline

inline uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

/// N ranks of one communicator living in this process.
struct Ranks {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<PeerInfo> infos;
};

// The job secret of the ranks in these tests, unless a test gives another.
inline const JobSecret kTestSecret = fresh_secret();

/// `adjust` (optional) changes each rank's settings before its transport is made.
inline Ranks make_ranks(const TransportCase& c, int n, uint64_t job_id = random_seed(),
                 const JobSecret& secret = kTestSecret,
                 const std::function<void(TransportInit&)>& adjust = nullptr) {
  Ranks r;
  for (int i = 0; i < n; ++i) {
    TransportInit init;
    init.rank = i, init.size = n, init.job_id = job_id, init.secret = secret;
    init.single_copy_bytes = 4096;  // small, so that offers meet every path
    if (adjust) adjust(init);
    auto t = c.make(init);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return Ranks{};
    PeerInfo info;
    info.rank = i, info.pid = getpid(), info.host_id = local_host_id();
    info.addresses = {{c.transport, (*t)->address()}};
    r.transports.push_back(std::move(*t));
    r.infos.push_back(std::move(info));
  }
  return r;
}

/// Runs body(rank) for ranks 0..n-1 on their own threads and returns their statuses.
inline std::vector<absl::Status> on_threads(int n, const std::function<absl::Status(int)>& body) {
  std::vector<absl::Status> out(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { out[i] = body(i); });
  for (auto& t : threads) t.join();
  return out;
}

/// Connects ranks a and b, each from its own thread (connect blocks until both call it).
inline bool connect_pair(Ranks& r, int a, int b, std::unique_ptr<Pair>& pa, std::unique_ptr<Pair>& pb) {
  const Deadline deadline = Deadline::after(kConnectTimeout);
  const auto st = on_threads(2, [&](int side) -> absl::Status {
    auto p = side == 0 ? r.transports[a]->connect(r.infos[b], deadline)
                       : r.transports[b]->connect(r.infos[a], deadline);
    if (!p.ok()) return p.status();
    (side == 0 ? pa : pb) = std::move(*p);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  return pa != nullptr && pb != nullptr;
}

/// A position-dependent byte: a dropped, repeated or reordered byte changes what follows.
inline std::byte pattern(uint64_t seed, uint64_t i) {
  return static_cast<std::byte>(((i + seed) * 0x9E3779B97F4A7C15ull) >> 56);
}
inline std::vector<std::byte> make_message(uint64_t seed, size_t n) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(seed, i);
  return v;
}
/// Index of the first byte that differs from the pattern, or -1.
inline int64_t first_mismatch(const std::vector<std::byte>& v, uint64_t seed) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != pattern(seed, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

struct Outgoing {
  Pair* pair;
  const std::vector<std::byte>* data;
  size_t done = 0;
};

/// How a progress loop drives its links: send_some and recv_some, or offer_some (the peer may
/// read straight from the sender's buffer), lend_input (the same, for the caller's input: ucx
/// lets the peer read it in one copy) or lend_to_reduce (the same, in a reduce-scatter's
/// words: ucx cuts it into smaller messages) with recv_into and recv_some taking turns.
enum class Calls { kCopy, kOffer, kLendInput, kLendToReduce };
struct Incoming {
  Pair* pair;
  std::vector<std::byte>* out;  // sized to the expected message
  size_t done = 0;
};

/// One rank's progress loop: alternates send_some and recv_some on all its links until
/// every message is through. `rng` (optional) randomises slice sizes and receive limits.
inline absl::Status progress(std::vector<Outgoing> sends, std::vector<Incoming> recvs,
                      std::mt19937_64* rng, Calls calls = Calls::kCopy) {
  const Deadline deadline = Deadline::after(kTransferTimeout);
  auto pick = [&](size_t left) -> size_t {
    if (rng == nullptr || left == 0) return left;
    static constexpr size_t kCaps[] = {1, 7, 4096, 65536, 1 << 20};
    const size_t cap = kCaps[(*rng)() % 5];
    return std::min(left, 1 + (*rng)() % cap);
  };
  Backoff backoff;
  for (uint64_t round = 0; round < kMaxRounds; ++round) {
    bool moved = false, finished = true;
    for (Outgoing& s : sends) {
      if (s.done == s.data->size()) continue;
      const std::byte* from = s.data->data() + s.done;
      const size_t len = pick(s.data->size() - s.done);
      auto n = calls == Calls::kOffer          ? s.pair->offer_some(from, len)
               : calls == Calls::kLendInput    ? s.pair->lend_input(from, len)
               : calls == Calls::kLendToReduce ? s.pair->lend_to_reduce(from, len)
                                               : s.pair->send_some(from, len);
      if (!n.ok()) return n.status();
      s.done += *n, moved |= *n > 0, finished = false;
    }
    for (Incoming& r : recvs) {
      if (r.done == r.out->size()) continue;
      if (calls != Calls::kCopy && (rng == nullptr || (*rng)() % 2 == 0)) {
        auto n = r.pair->recv_into(r.out->data() + r.done, pick(r.out->size() - r.done));
        if (!n.ok()) return n.status();
        r.done += *n;
        if (r.done > r.out->size()) return absl::InternalError("recv_into took more than max");
        moved |= *n > 0, finished = false;
        continue;
      }
      auto n = r.pair->recv_some(pick(r.out->size() - r.done), [&](const std::byte* d, size_t len) {
        const size_t room = r.out->size() - r.done;
        std::memcpy(r.out->data() + r.done, d, std::min(len, room));
        r.done += len;  // overrun shows as done > size below
      });
      if (!n.ok()) return n.status();
      if (r.done > r.out->size()) return absl::InternalError("recv_some handed over more than max");
      moved |= *n > 0, finished = false;
    }
    if (finished) return absl::OkStatus();
    if (moved) {
      backoff.reset();
    } else {
      if (deadline.expired()) return deadline_error("the test's messages");
      backoff.pause();
    }
  }
  return absl::InternalError("progress loop ran out of rounds");
}

/// Both ranks of a link send `a_bytes` / `b_bytes` to each other at the same time and check
/// what arrives. Returns the seconds the exchange took.
inline double exchange(Pair& a, Pair& b, size_t a_bytes, size_t b_bytes, uint64_t seed, bool random,
                Calls calls = Calls::kCopy) {
  const auto a_msg = make_message(seed, a_bytes), b_msg = make_message(seed + 1, b_bytes);
  std::vector<std::byte> at_b(a_bytes), at_a(b_bytes);  // zero-filled: pages already faulted in
  const weft::testing::Stopwatch start;
  const auto st = on_threads(2, [&](int side) {
    std::mt19937_64 rng(seed + side);
    if (side == 0) return progress({{&a, &a_msg}}, {{&a, &at_a}}, random ? &rng : nullptr, calls);
    return progress({{&b, &b_msg}}, {{&b, &at_b}}, random ? &rng : nullptr, calls);
  });
  // Lent bytes may be kept where they lie until then.
  if (calls == Calls::kLendInput || calls == Calls::kLendToReduce) {
    a.call_received(), b.call_received();
    a.call_ends(), b.call_ends();
  }
  const double seconds = absl::ToDoubleSeconds(start.elapsed());
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
  EXPECT_EQ(first_mismatch(at_b, seed), -1) << a_bytes << " bytes from rank " << a.peer();
  EXPECT_EQ(first_mismatch(at_a, seed + 1), -1) << b_bytes << " bytes from rank " << b.peer();
  return seconds;
}

inline size_t drain(Pair& p) {
  auto n = p.recv_some(1 << 20, [](const std::byte*, size_t) {});
  return n.ok() ? *n : 0;
}

/// Moves one message of `total` bytes: `send(out)` and `receive(in)` each move what they can
/// without blocking and return how many bytes (`out` left and `in` arrived so far); until all
/// have left and arrived, an error, or kTransferTimeout. Returns how many arrived.
template <typename Send, typename Receive>
size_t pump(size_t total, Send send, Receive receive) {
  const Deadline deadline = Deadline::after(kTransferTimeout);
  Backoff backoff;
  size_t out = 0, in = 0;
  while ((out < total || in < total) && !deadline.expired()) {
    bool moved = false;
    if (out < total) {
      absl::StatusOr<size_t> n = send(out);
      if (!n.ok()) {
        ADD_FAILURE() << "send: " << n.status();
        return in;
      }
      out += *n, moved |= *n > 0;
    }
    absl::StatusOr<size_t> n = receive(in);
    if (!n.ok()) {
      ADD_FAILURE() << "receive: " << n.status();
      return in;
    }
    in += *n, moved |= *n > 0;
    moved ? backoff.reset() : backoff.pause();
  }
  return in;
}

#ifdef WEFT_HAVE_UCX
/// ucx with UCX_TLS set to `tls` while its context reads UCX's settings: UCX over shared
/// memory and CMA, or over tcp, on this one host.
inline MakeTransport ucx_over(const char* tls) {
  return [tls](const TransportInit& init) {
    const weft::testing::ScopedEnv env("UCX_TLS", tls);
    TransportInit forced = init;
    forced.forced = true;  // ranks of one host: ucx only because it is asked for
    return ucx::make_transport(forced);
  };
}
#endif

}  // namespace weft::transport
