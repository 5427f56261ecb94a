#include "src/shrink.hpp"

#include <time.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/stream.hpp"
#include "src/base/process.hpp"
#include "src/shrink_wire.hpp"
#include "transport/tcp/liveness.hpp"

namespace weft::detail {
namespace {

using shrink_wire::RankSet;

constexpr int kWatchIntervalMs = 5;       // how often the probe asks whether peers live...
constexpr int kListenerCheckRounds = 20;  // ...and every this many rounds, their listeners

void sleep_ms(int ms) {
  timespec ts{0, ms * 1'000'000L};
  nanosleep(&ts, nullptr);
}

// The peer as the control transport sees it: its control listener under the name "tcp".
PeerInfo control_view(const PeerInfo& peer) {
  PeerInfo view = peer;
  view.addresses = {{"tcp", peer.address_of(kControlAddress)}};
  return view;
}

absl::Status send_all(transport::Pair& pair, std::string_view data, Deadline deadline) {
  Waiter waiter("shrink: sending to a survivor", deadline);
  size_t sent = 0;
  while (sent < data.size()) {
    auto n = pair.send_some(reinterpret_cast<const std::byte*>(data.data()) + sent,
                            data.size() - sent);
    if (!n.ok()) return n.status();
    sent += *n;
    if (absl::Status s = waiter.after_pass(*n > 0, &pair); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Adds what has arrived on `pair`, up to `want` bytes in all, to `got`; no waiting.
absl::StatusOr<bool> receive_some(transport::Pair& pair, std::string& got, size_t want) {
  auto n = pair.recv_some(want - got.size(), [&](const std::byte* data, size_t len) {
    got.append(reinterpret_cast<const char*>(data), len);
  });
  if (!n.ok()) return n.status();
  return *n > 0;
}

absl::StatusOr<std::string> receive_exact(transport::Pair& pair, size_t len, Deadline deadline,
                                          const char* what) {
  Waiter waiter(what, deadline);
  std::string got;
  while (got.size() < len) {
    auto moved = receive_some(pair, got, len);
    if (!moved.ok()) return moved.status();
    if (absl::Status s = waiter.after_pass(*moved, &pair); !s.ok()) return s;
  }
  return got;
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Differs for every set of survivors, so communicators formed by different leaders never
// share shm ring names or accept each other's handshakes.
uint64_t derive_job_id(uint64_t job_id, const RankSet& survivors) {
  uint64_t h = mix(job_id ^ survivors.size());
  for (size_t r = 0; r < survivors.size(); ++r) {
    if (survivors[r]) h = mix(h ^ (r + 1));
  }
  return h == 0 ? 1 : h;
}

}  // namespace

ShrinkAgreement::ShrinkAgreement(int rank, std::vector<PeerInfo> peers,
                                 transport::Transport& control,
                                 const transport::TransportInit& control_init, uint64_t job_id)
    : rank_(rank),
      peers_(std::move(peers)),
      control_(control),
      control_init_(control_init),
      job_id_(job_id) {}

void ShrinkAgreement::probe(Deadline deadline) {
  const int n = static_cast<int>(peers_.size());
  links_.clear();
  links_.resize(n);
  // connect() blocks until the handshake or the deadline: one thread per peer, so that a
  // silent peer costs the deadline once, not once per peer after it.
  std::unique_ptr<std::atomic<bool>[]> gone(new std::atomic<bool>[n]);
  std::unique_ptr<std::atomic<bool>[]> done(new std::atomic<bool>[n]);
  std::vector<std::thread> threads;
  for (int p = 0; p < n; ++p) {
    gone[p] = false;
    done[p] = p == rank_;
    if (p == rank_) continue;
    threads.emplace_back([&, p] {
      auto pair = control_.connect(control_view(peers_[p]), deadline.cancelled_by(&gone[p]));
      if (pair.ok()) links_[p] = *std::move(pair);
      done[p] = true;
    });
  }
  // A lower peer that exited never dials, and waiting for it would cost the whole deadline:
  // on this host its process tells at once, elsewhere its listener refuses connections.
  const std::string& host = peers_[rank_].host_id;
  for (int round = 1, waiting = 1; waiting > 0; ++round) {
    waiting = 0;
    for (int p = 0; p < n; ++p) {
      if (done[p]) continue;
      ++waiting;
      if (peers_[p].host_id == host && !process_alive(peers_[p].pid)) gone[p] = true;
      if (p < rank_ && round % kListenerCheckRounds == 0 &&
          transport::tcp::ask_alive(control_init_, {{p, peers_[p].address_of(kControlAddress)}},
                                    absl::Milliseconds(kWatchIntervalMs))[0]
                  .outcome == transport::tcp::PeerAnswer::kGone) {
        gone[p] = true;
      }
    }
    if (waiting > 0) sleep_ms(kWatchIntervalMs);
  }
  for (std::thread& t : threads) t.join();
}

absl::StatusOr<ShrinkAgreement::Outcome> ShrinkAgreement::agree(absl::Duration timeout) {
  probe(Deadline::after(timeout));
  leader_ = rank_;
  for (int p = 0; p < rank_; ++p) {
    if (links_[p] != nullptr) {
      leader_ = p;
      break;
    }
  }
  const Deadline deadline = Deadline::after(timeout);
  auto outcome = leader_ == rank_ ? decide(deadline) : follow(deadline);
  if (outcome.ok()) survivors_ = outcome->survivors;
  return outcome;
}

absl::StatusOr<ShrinkAgreement::Outcome> ShrinkAgreement::decide(Deadline deadline) {
  const int n = static_cast<int>(peers_.size());
  // Every rank this leader reached may report; collect what arrives until all have or the
  // deadline passes. A rank that chose another leader, or died since, never reports.
  std::vector<std::string> raw(n);
  std::vector<std::optional<shrink_wire::Report>> reports(n);
  std::vector<bool> open(n, false);
  int waiting = 0;
  for (int p = 0; p < n; ++p) waiting += open[p] = links_[p] != nullptr;
  Waiter waiter("shrink: waiting for the survivors' reports", deadline);
  const size_t want = shrink_wire::report_bytes(n);
  while (waiting > 0) {
    bool moved = false;
    for (int p = 0; p < n; ++p) {
      if (!open[p]) continue;
      auto got = receive_some(*links_[p], raw[p], want);
      if (got.ok() && raw[p].size() < want) {
        moved |= *got;
        continue;
      }
      open[p] = false, --waiting, moved = true;
      if (!got.ok()) continue;
      auto report = shrink_wire::decode_report(raw[p], n);
      if (report.ok() && report->from_rank == p) {
        reports[p] = *std::move(report);
      } else {
        std::fprintf(stderr, "weft: warning: shrink: rank %d: ignoring rank %d's report: %s\n",
                     rank_, p, report.ok() ? "it names another rank" :
                                             std::string(report.status().message()).c_str());
      }
    }
    if (absl::Status s = waiter.after_pass(moved, nullptr); !s.ok()) break;  // the rest: out
  }

  // Admit in rank order; every pair of survivors must have reached each other.
  RankSet survivors(n, false);
  survivors[rank_] = true;
  for (int r = rank_ + 1; r < n; ++r) {
    if (!reports[r]) continue;
    bool fits = true;
    for (int s = 0; s < r && fits; ++s) {
      if (!survivors[s]) continue;
      const bool s_reached_r = s == rank_ || reports[s]->reached[r];
      fits = s_reached_r && reports[r]->reached[s];
    }
    survivors[r] = fits;
  }
  shrink_wire::Decision decision{derive_job_id(job_id_, survivors), survivors};
  const std::string wire = shrink_wire::encode_decision(decision);
  for (int p = 0; p < n; ++p) {
    if (!reports[p]) continue;
    absl::Status s = send_all(*links_[p], wire, deadline);
    if (!s.ok() && survivors[p]) {
      return absl::UnavailableError(absl::StrCat("shrink: rank ", rank_, " (the leader) could not "
                                                 "tell survivor rank ", p, " the outcome: ",
                                                 s.message(), "; call shrink again"));
    }
  }
  return outcome_of(survivors, decision.new_job_id);
}

absl::StatusOr<ShrinkAgreement::Outcome> ShrinkAgreement::follow(Deadline deadline) {
  const int n = static_cast<int>(peers_.size());
  shrink_wire::Report report{rank_, RankSet(n, false)};
  for (int p = 0; p < n; ++p) report.reached[p] = links_[p] != nullptr;
  transport::Pair& leader = *links_[leader_];
  const std::string context = absl::StrCat("shrink: rank ", rank_, " and its leader, rank ",
                                           leader_, ": ");
  if (absl::Status s = send_all(leader, shrink_wire::encode_report(report), deadline); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(context, s.message(), "; call shrink again"));
  }
  auto raw = receive_exact(leader, shrink_wire::decision_bytes(n), deadline,
                           "shrink: waiting for the leader's decision");
  if (!raw.ok()) {
    return absl::Status(raw.status().code(),
                        absl::StrCat(context, raw.status().message(), "; call shrink again"));
  }
  auto decision = shrink_wire::decode_decision(*raw, n);
  if (!decision.ok()) return absl::DataLossError(absl::StrCat(context, decision.status().message()));
  if (!decision->survivors[rank_] || !decision->survivors[leader_]) {
    return absl::UnavailableError(absl::StrCat(
        context, "the leader left rank ", rank_, " out of the new communicator: it could not "
        "reach every survivor (or did not hear from this rank in time)"));
  }
  return outcome_of(decision->survivors, decision->new_job_id);
}

ShrinkAgreement::Outcome ShrinkAgreement::outcome_of(const std::vector<bool>& survivors,
                                                     uint64_t job_id) const {
  Outcome out;
  out.job_id = job_id;
  for (int r = 0; r < static_cast<int>(survivors.size()); ++r) {
    if (!survivors[r]) {
      out.dropped.push_back(r);
      continue;
    }
    if (r == rank_) out.rank = static_cast<int>(out.survivors.size());
    out.survivors.push_back(r);
  }
  out.size = static_cast<int>(out.survivors.size());
  return out;
}

absl::StatusOr<std::vector<PeerInfo>> ShrinkAgreement::exchange(const PeerInfo& self,
                                                                Deadline deadline) {
  const int size = static_cast<int>(survivors_.size());
  std::vector<std::string> blobs(size);
  // Receives one PeerInfo blob.
  auto receive_blob = [&](transport::Pair& pair) -> absl::StatusOr<std::string> {
    auto header = receive_exact(pair, shrink_wire::kBlobHeaderBytes, deadline,
                                "shrink: exchanging addresses");
    if (!header.ok()) return header.status();
    auto len = shrink_wire::decode_blob_length(*header);
    if (!len.ok()) return len.status();
    return receive_exact(pair, *len, deadline, "shrink: exchanging addresses");
  };
  if (leader_ != rank_) {
    transport::Pair& leader = *links_[leader_];
    if (absl::Status s = send_all(leader, shrink_wire::encode_blob(self.encode()), deadline);
        !s.ok()) {
      return s;
    }
    for (int i = 0; i < size; ++i) {
      auto blob = receive_blob(leader);
      if (!blob.ok()) return blob.status();
      blobs[i] = *std::move(blob);
    }
  } else {
    blobs[0] = self.encode();  // the leader is the lowest survivor: new rank 0
    for (int i = 1; i < size; ++i) {
      auto blob = receive_blob(*links_[survivors_[i]]);
      if (!blob.ok()) return blob.status();
      blobs[i] = *std::move(blob);
    }
    std::string table;
    for (const std::string& b : blobs) table += shrink_wire::encode_blob(b);
    for (int i = 1; i < size; ++i) {
      if (absl::Status s = send_all(*links_[survivors_[i]], table, deadline); !s.ok()) return s;
    }
  }
  std::vector<PeerInfo> table;
  for (int i = 0; i < size; ++i) {
    auto info = PeerInfo::decode(blobs[i]);
    if (!info.ok()) return info.status();
    if (info->rank != i) {
      return absl::DataLossError(absl::StrCat("shrink: the address table's entry ", i,
                                              " is rank ", info->rank, "'s"));
    }
    table.push_back(*std::move(info));
  }
  return table;
}

}  // namespace weft::detail
