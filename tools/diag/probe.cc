#include "tools/diag/probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/stream.hpp"
#include "src/comm.hpp"
#include "tools/diag/schedule.hpp"

namespace weft::tools::diag {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Transports by number, for the gathered rows (doubles).
constexpr const char* kTransports[] = {"none", "shm", "tcp", "ucx"};
double transport_code(std::string_view name) {
  for (size_t i = 0; i < std::size(kTransports); ++i) {
    if (name == kTransports[i]) return static_cast<double>(i);
  }
  return 0;
}

// One pair's measurements, both ends driving the same sequence.
class PairProbe {
 public:
  PairProbe(transport::Pair& pair, bool first, std::byte* buffer, size_t bytes, Deadline deadline)
      : pair_(pair), first_(first), buffer_(buffer), bytes_(bytes), deadline_(deadline) {}

  // Half the median round trip of `pings` one-byte exchanges started by this end, after
  // those started by the other (each end times its own).
  absl::StatusOr<double> latency_us(int pings) {
    std::vector<double> mine;
    for (int turn = 0; turn < 2; ++turn) {
      const bool leading = (turn == 0) == first_;
      for (int i = 0; i < pings; ++i) {
        std::byte b{1};
        const auto t0 = Clock::now();
        if (leading) {
          if (auto s = send(&b, 1); !s.ok()) return s;
          if (auto s = recv(&b, 1); !s.ok()) return s;
          mine.push_back(seconds_since(t0) * 1e6 / 2);
        } else {
          if (auto s = recv(&b, 1); !s.ok()) return s;
          if (auto s = send(&b, 1); !s.ok()) return s;
        }
      }
    }
    std::nth_element(mine.begin(), mine.begin() + mine.size() / 2, mine.end());
    return mine[mine.size() / 2];
  }

  // This end's outgoing bandwidth in GB/s: each end sends `bytes_` once to warm the path up
  // (tcp's congestion window), then `transfers` times timed, each until the peer's one-byte
  // answer. The fastest counts: noise (a busy core, a neighbour's burst) only ever slows a
  // transfer down, so the fastest is the closest to what the link can do.
  absl::StatusOr<double> bandwidth_GBps(int transfers) {
    double out = 0;
    for (int turn = 0; turn < 2; ++turn) {
      const bool sending = (turn == 0) == first_;
      for (int timed = 0; timed <= transfers; ++timed) {
        std::byte done{0};
        const auto t0 = Clock::now();
        if (sending) {
          if (auto s = send(buffer_, bytes_); !s.ok()) return s;
          if (auto s = recv(&done, 1); !s.ok()) return s;
          if (timed) out = std::max(out, static_cast<double>(bytes_) / seconds_since(t0) / 1e9);
        } else {
          if (auto s = recv(buffer_, bytes_); !s.ok()) return s;
          if (auto s = send(&done, 1); !s.ok()) return s;
        }
      }
    }
    return out;
  }

 private:
  absl::Status send(const std::byte* data, size_t len) {
    Waiter waiter("diag probe (send)", deadline_);
    for (size_t sent = 0; sent < len;) {
      auto n = pair_.send_some(data + sent, len - sent);
      if (!n.ok()) return n.status();
      sent += *n;
      if (absl::Status s = waiter.after_pass(*n > 0, &pair_); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status recv(std::byte* dst, size_t len) {
    Landing landing = Landing::copy(dst, len);
    Waiter waiter("diag probe (receive)", deadline_);
    while (!landing.done()) {
      auto n = receive_into(pair_, landing);
      if (!n.ok()) return n.status();
      if (absl::Status s = waiter.after_pass(*n > 0, &pair_); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  transport::Pair& pair_;
  const bool first_;
  std::byte* buffer_;
  const size_t bytes_;
  const Deadline deadline_;
};

// Every rank's row: per peer its transport and rail count, then per repeat, peer and path
// slot the latency and the outgoing bandwidth (NaN: not measured).
struct Row {
  int ranks, slots, repeats;
  std::vector<double> v;
  Row(int n, int s, int r) : ranks(n), slots(s), repeats(r), v(size(n, s, r), NAN) {}
  static size_t size(int n, int s, int r) { return 2 * n + static_cast<size_t>(r) * n * s * 2; }
  double& transport(int peer) { return v[2 * peer]; }
  double& rails(int peer) { return v[2 * peer + 1]; }
  double& at(int repeat, int peer, int slot, int what) {
    return v[2 * ranks + ((static_cast<size_t>(repeat) * ranks + peer) * slots + slot) * 2 + what];
  }
};

// Takes rail `only` (or none: every rail) as the link's one sending rail.
void restrict_rails(transport::Pair& pair, const std::vector<std::string>& rails, int only) {
  for (int r = 0; r < static_cast<int>(rails.size()); ++r) {
    pair.use_rail(rails[r], only < 0 || r == only, /*announce=*/false);
  }
}

}  // namespace

absl::StatusOr<ProbeResult> run_probe(Communicator& communicator, const ProbeOptions& o,
                                      const ProbeProgress& progress) {
  detail::Comm& comm = communicator.impl();
  const int n = comm.size();
  const int me = comm.rank();
  const std::vector<Round> rounds = tournament(n);
  const absl::Duration timeout = comm.config().timeout;

  // Open every link first (in rounds, as the measurement will go) to learn the rail counts
  // that size the rows.
  std::vector<std::vector<std::string>> rails(n);
  int my_slots = 1;
  for (const Round& round : rounds) {
    const int peer = partner(round, me);
    if (peer < 0) continue;
    absl::Status s = comm.with_links([&](LinkProvider& links) -> absl::Status {
      auto pair = links.link(peer, Deadline::after(timeout));
      if (!pair.ok()) return pair.status();
      rails[peer] = (*pair)->rail_names();
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    if (o.rails && rails[peer].size() > 1) {
      my_slots = std::max(my_slots, 1 + static_cast<int>(rails[peer].size()));
    }
  }
  int32_t slots = my_slots;
  AllreduceOptions max;
  max.op = ReduceOp::kMax;
  if (auto s = communicator.allreduce(&slots, &slots, 1, DataType::kInt32, max); !s.ok()) return s;

  Row row(n, slots, o.repeats);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    row.transport(peer) = transport_code(comm.topology().transport_to(peer)->name());
    row.rails(peer) = static_cast<double>(rails[peer].size());
  }
  std::vector<std::byte> buffer(std::max<size_t>(o.message_bytes, 1));
  std::memset(buffer.data(), 0x5a, buffer.size());  // faulted in before anything is timed

  for (int k = 0; k < o.repeats; ++k) {
    for (size_t r = 0; r < rounds.size(); ++r) {
      if (me == 0 && progress) {
        progress(absl::StrCat("probe: repeat ", k + 1, "/", o.repeats, ", round ", r + 1, "/",
                              rounds.size(), " (", rounds[r].size(), " pairs at once)"));
      }
      const int peer = partner(rounds[r], me);
      if (peer >= 0) {
        absl::Status s = comm.with_links([&](LinkProvider& links) -> absl::Status {
          auto pair = links.link(peer, Deadline::after(timeout));
          if (!pair.ok()) return pair.status();
          const int paths = rails[peer].size() > 1 ? slots : 1;
          for (int slot = 0; slot < paths; ++slot) {
            if (slot > static_cast<int>(rails[peer].size())) break;
            restrict_rails(**pair, rails[peer], slot - 1);
            PairProbe probe(**pair, me < peer, buffer.data(), o.message_bytes,
                            Deadline::after(timeout));
            auto lat = probe.latency_us(o.pings);
            auto bw = lat.ok() ? probe.bandwidth_GBps(o.transfers) : lat.status();
            restrict_rails(**pair, rails[peer], -1);
            if (!bw.ok()) {
              return absl::Status(bw.status().code(),
                                  absl::StrCat("probing rank ", me, " <-> ", peer,
                                               slot == 0 ? "" : absl::StrCat(" rail ", slot - 1),
                                               ": ", bw.status().message()));
            }
            row.at(k, peer, slot, 0) = *lat;
            row.at(k, peer, slot, 1) = *bw;
          }
          return absl::OkStatus();
        });
        if (!s.ok()) return s;
      }
      // The next round starts together, so its pairs never overlap this one's.
      if (auto s = communicator.barrier(); !s.ok()) return s;
    }
  }

  std::vector<double> all(row.v.size() * n);
  if (auto s = communicator.allgather(row.v.data(), all.data(), row.v.size(), DataType::kFloat64);
      !s.ok()) {
    return s;
  }

  ProbeResult result;
  result.ranks = n;
  for (const PeerInfo& p : comm.topology().peers()) {
    result.hosts.push_back(p.host_id.substr(0, p.host_id.find('/')));
  }
  result.paths.push_back("link");
  std::vector<std::string> names;
  for (const auto& r : rails) {
    if (r.size() > names.size()) names = r;
  }
  for (int s = 1; s < slots; ++s) {
    result.paths.push_back(s - 1 < static_cast<int>(names.size())
                               ? absl::StrCat("rail ", s - 1, " (", names[s - 1], ")")
                               : absl::StrCat("rail ", s - 1));
  }
  for (int from = 0; from < n; ++from) {
    Row theirs(n, slots, o.repeats);
    std::copy_n(all.begin() + static_cast<ptrdiff_t>(from * row.v.size()), row.v.size(),
                theirs.v.begin());
    for (int to = 0; to < n; ++to) {
      if (to == from) continue;
      const auto code = static_cast<size_t>(theirs.transport(to));
      const std::string transport = code < std::size(kTransports) ? kTransports[code] : "?";
      for (int slot = 0; slot < slots; ++slot) {
        Cell c;
        c.from = from, c.to = to, c.path = slot;
        c.klass = slot == 0 ? transport : transport + " rail";
        for (int k = 0; k < o.repeats; ++k) {
          const double lat = theirs.at(k, to, slot, 0);
          const double bw = theirs.at(k, to, slot, 1);
          if (!std::isnan(lat) && !std::isnan(bw)) c.repeats.push_back({lat, bw});
        }
        if (!c.repeats.empty()) result.cells.push_back(std::move(c));
      }
    }
  }
  return result;
}

}  // namespace weft::tools::diag
