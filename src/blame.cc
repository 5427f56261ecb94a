#include "src/blame.hpp"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/shrink.hpp"

namespace weft::detail {
namespace {

using transport::tcp::Blame;
using transport::tcp::PeerAnswer;

// "rank 2", "ranks 1 and 3", "ranks 1, 3 and 5".
std::string ranks_text(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return absl::StrCat("rank ", ranks[0]);
  std::string out = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ", ranks[i]);
  }
  return out;
}

// ", and ranks 1 and 3 report the same" when other ranks concluded the same about `culprit`.
std::string corroboration(const std::map<int, std::vector<int>>& reports, int culprit) {
  auto it = reports.find(culprit);
  if (it == reports.end()) return "";
  return absl::StrCat("; ", ranks_text(it->second), it->second.size() == 1 ? " reports" : " report",
                      " the same");
}

}  // namespace

bool worth_blaming(const absl::Status& failure) {
  return failure.code() == absl::StatusCode::kDeadlineExceeded ||
         failure.code() == absl::StatusCode::kUnavailable;
}

Blamed blame(const absl::Status& failure, const transport::TransportInit& control,
             const std::vector<PeerInfo>& peers, absl::Duration wait) {
  std::vector<std::pair<int, std::string>> asked;
  for (const PeerInfo& p : peers) {
    if (p.rank != control.rank) asked.emplace_back(p.rank, p.address_of(kControlAddress));
  }
  return judge(failure, control.rank, transport::tcp::ask_alive(control, asked, wait), wait);
}

Blamed judge(const absl::Status& failure, int rank, const std::vector<PeerAnswer>& answers,
             absl::Duration wait) {
  std::vector<int> silent, gone;
  std::map<int, std::vector<int>> reports;       // culprit -> ranks that concluded so themselves
  std::map<int, std::vector<int>> gone_reports;  // culprit -> ranks that saw its port refuse
  std::map<int, Blame::Kind> reported_kind;
  for (const PeerAnswer& a : answers) {
    if (a.outcome == PeerAnswer::kSilent) silent.push_back(a.rank);
    if (a.outcome == PeerAnswer::kGone) gone.push_back(a.rank);
    if (a.outcome == PeerAnswer::kAlive && a.blame.kind != Blame::kNone) {
      reports[a.blame.rank].push_back(a.rank);
      reported_kind[a.blame.rank] = a.blame.kind;
      if (a.blame.kind == Blame::kGone) gone_reports[a.blame.rank].push_back(a.rank);
    }
  }
  const std::string me = absl::StrCat("rank ", rank);
  Blamed out;
  std::string finding;
  if (!silent.empty() && gone_reports.count(silent[0])) {
    // A killed process keeps its port open, answering nothing, until the kernel has torn
    // down its memory (hundreds of ms for a large one): silence here and a refused port
    // elsewhere is one exiting process, and the refusal is the stronger evidence.
    const int culprit = silent[0];
    out.conclusion = Blame{Blame::kGone, culprit};
    finding = absl::StrCat("rank ", culprit, " is gone (", me, " heard it from ",
                           ranks_text(gone_reports[culprit]),
                           ", which saw its port refuse connections; ", me,
                           " itself had no answer to a liveness query within ",
                           absl::FormatDuration(wait), ")");
  } else if (!silent.empty()) {
    out.conclusion = Blame{Blame::kStopped, silent[0]};
    finding = absl::StrCat(ranks_text(silent), " stopped answering (", me, " saw it: no answer to a liveness query within ",
                           absl::FormatDuration(wait), corroboration(reports, silent[0]), ")");
  } else if (!gone.empty()) {
    out.conclusion = Blame{Blame::kGone, gone[0]};
    finding = absl::StrCat(ranks_text(gone), gone.size() == 1 ? " is" : " are",
                           " gone (", me, " saw it: the port refuses connections, so the process "
                           "exited or closed its communicator", corroboration(reports, gone[0]),
                           ")");
  } else if (!reports.empty()) {
    // Every rank answered this one, yet others found a rank at fault: a fault between them.
    auto most = reports.begin();
    for (auto it = reports.begin(); it != reports.end(); ++it) {
      if (it->second.size() > most->second.size()) most = it;
    }
    out.conclusion = Blame{reported_kind[most->first], most->first};
    finding = absl::StrCat(
        "rank ", most->first, reported_kind[most->first] == Blame::kGone ? " is gone" : " stopped answering",
        " (", me, " heard it from ", ranks_text(most->second), "; ", me,
        " itself found every rank answering, so the fault may lie between those ranks)");
  } else {
    finding = absl::StrCat("every rank answers (", me, " saw it: each answered a liveness query), "
                           "so none stopped: a rank may be late to this call (busy with its own "
                           "work, or it never made the call), or a link between live ranks failed");
  }
  out.status = absl::Status(failure.code(), absl::StrCat(finding, "; what ", me, " met first: ",
                                                         failure.message()));
  return out;
}

}  // namespace weft::detail
