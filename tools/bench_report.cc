#include "tools/bench_report.hpp"

#include <cstring>
#include <optional>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace weft::tools {
namespace {

// The fixed columns, as nccl-tests prints them.
constexpr int kPrefixWidth = 52;  // "%12s  %12s  %8s  %6s  %6s"
constexpr int kWeftWidth = 33;    // "  %7s  %6s  %6s  %6s"
constexpr int kPeerWidth = 25;    // "  %7s  %6s  %6s"
constexpr int kRatioWidth = 16;   // "  %6s  %6s"

std::string centered(const std::string& text, int width) {
  const int pad = width - static_cast<int>(text.size());
  if (pad <= 0) return text;
  return std::string(pad / 2, ' ') + text + std::string(pad - pad / 2, ' ');
}

std::string wrong_text(const Cell& c) {
  return c.checked ? absl::StrFormat("%llu", static_cast<unsigned long long>(c.wrong)) : "N/A";
}

int root_column(const Call& call) {
  return call.kind == CollectiveKind::kBroadcast ? call.root : -1;
}

const char* redop_column(const Call& call) { return reduces(call.kind) ? name_of(call.op) : "none"; }

// A placement's columns, or null where the peer has no such call. Written with
// nlohmann-json: an infinite or NaN number (a zero-time row) becomes null, not bad JSON.
nlohmann::ordered_json json_cell(const Cell& c) {
  if (!c.supported) return nullptr;
  return {{"time_us", c.us},
          {"algbw", c.algbw},
          {"busbw", c.busbw},
          {"wrong", c.checked ? nlohmann::ordered_json(c.wrong) : nlohmann::ordered_json()}};
}

}  // namespace

std::string fit(double value, int width) {
  for (int decimals = 2; decimals >= 0; --decimals) {
    std::string s = absl::StrFormat("%*.*f", width, decimals, value);
    if (static_cast<int>(s.size()) <= width) return s;
  }
  return absl::StrFormat("%*.1e", width, value);
}

Report::Report(int nranks, const char* peer, FILE* json, bool progress)
    : nranks_(nranks), peer_(peer), json_(json), progress_(progress) {}

void Report::print_columns() const {
  std::string groups = "#" + std::string(kPrefixWidth - 1, ' ') +
                       centered("out-of-place", kWeftWidth) + centered("in-place", kWeftWidth);
  std::string names = absl::StrFormat("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type",
                                      "redop", "root");
  std::string units = absl::StrFormat("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int i = 0; i < 2; ++i) {
    absl::StrAppendFormat(&names, "  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
    absl::StrAppendFormat(&units, "  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  }
  if (peer_ != nullptr) {
    const std::string p = peer_;
    groups += centered(p + " out-of-place", kPeerWidth) + centered(p + " in-place", kPeerWidth) +
              centered("weft/" + p, kRatioWidth);
    for (int i = 0; i < 2; ++i) {
      absl::StrAppendFormat(&names, "  %7s  %6s  %6s", "time", "busbw", "#wrong");
      absl::StrAppendFormat(&units, "  %7s  %6s  %6s", "(us)", "(GB/s)", "");
    }
    // busbw ratios, out of place and in place: out of place, a local copy can hide a slow
    // exchange.
    absl::StrAppendFormat(&names, "  %6s  %6s", "out", "in");
    absl::StrAppendFormat(&units, "  %6s  %6s", "ratio", "ratio");
  }
  for (std::string* line : {&groups, &names, &units}) {
    while (!line->empty() && line->back() == ' ') line->pop_back();
  }
  std::printf("%s\n%s\n%s\n", groups.c_str(), names.c_str(), units.c_str());
}

// On stdout, shown only where that is a terminal: mpirun forwards a rank's stdout and stderr
// separately, and progress on stderr landed in the middle of the table's rows.
void Report::progress(int k, int total, const Call& call, size_t bytes) const {
  if (!progress_) return;
  std::printf("\r\033[K[%d/%d] %s %s %s %zu B", k, total, name_of(call.kind),
              name_of(call.type), redop_column(call), bytes);
  std::fflush(stdout);
}

void Report::end_progress() const {
  if (!progress_) return;
  std::printf("\r\033[K");
  std::fflush(stdout);  // before a message on stderr
}

void Report::print(const Row& row) const {
  const Call& c = row.call;
  end_progress();
  std::string line = absl::StrFormat("%12zu  %12zu  %8s  %6s  %6d", row.bytes, c.count,
                                     name_of(c.type), redop_column(c), root_column(c));
  for (const Cell& w : row.weft) {
    absl::StrAppendFormat(&line, "  %7s  %6s  %6s  %6s", fit(w.us, 7), fit(w.algbw, 6),
                          fit(w.busbw, 6), wrong_text(w));
  }
  // weft's busbw over the peer's, out of place and in place; null where the peer has none.
  std::optional<double> ratio[2];
  if (peer_ != nullptr) {
    for (const Cell& p : row.peer) {
      if (p.supported) {
        absl::StrAppendFormat(&line, "  %7s  %6s  %6s", fit(p.us, 7), fit(p.busbw, 6), wrong_text(p));
      } else {
        absl::StrAppendFormat(&line, "  %7s  %6s  %6s", "n/a", "n/a", "n/a");
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (row.peer[i].supported && row.peer[i].busbw > 0) {
        ratio[i] = row.weft[i].busbw / row.peer[i].busbw;
      }
      absl::StrAppendFormat(&line, "  %6s", ratio[i] ? fit(*ratio[i], 6) : std::string("n/a"));
    }
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (json_ == nullptr) return;
  nlohmann::ordered_json j = {{"collective", name_of(c.kind)}, {"ranks", nranks_},
                              {"size", row.bytes},           {"count", c.count},
                              {"type", name_of(c.type)},     {"redop", redop_column(c)},
                              {"root", root_column(c)}};
  j["out_of_place"] = json_cell(row.weft[0]);
  j["in_place"] = json_cell(row.weft[1]);
  if (peer_ != nullptr) {
    j["peer"] = peer_;
    j["peer_out_of_place"] = json_cell(row.peer[0]);
    j["peer_in_place"] = json_cell(row.peer[1]);
    j["ratio"] = ratio[0] ? nlohmann::ordered_json(*ratio[0]) : nlohmann::ordered_json();
    j["ratio_in_place"] = ratio[1] ? nlohmann::ordered_json(*ratio[1]) : nlohmann::ordered_json();
  } else {
    j["peer"] = nullptr;
  }
  std::fprintf(json_, "%s\n", j.dump().c_str());
  std::fflush(json_);
}

}  // namespace weft::tools
