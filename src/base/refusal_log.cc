#include "src/base/refusal_log.hpp"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/base/deadline.hpp"

namespace weft {

RefusalLog::RefusalLog(std::string who, Sink sink, Clock clock)
    : who_(std::move(who)), sink_(std::move(sink)), clock_(std::move(clock)) {
  if (!sink_) {
    sink_ = [](const std::string& line) { std::fprintf(stderr, "weft: warning: %s\n", line.c_str()); };
  }
  // The monotonic clock, as every pause and deadline in weft: the wall clock may be stepped.
  if (!clock_) clock_ = [] { return monotonic_now(); };
}

RefusalLog::~RefusalLog() { flush(); }

void RefusalLog::refused(const std::string& kind, const std::string& detail) {
  last_ = detail;
  if (full_lines_ < kFullLines && unreported_total_ == 0) {
    ++full_lines_;
    ++total_;
    sink_(absl::StrCat(who_, ": ", detail,
                       full_lines_ == kFullLines
                           ? absl::StrCat(" (further refusals are summarised every ",
                                          absl::FormatDuration(kInterval), ")")
                           : ""));
    return;
  }
  add(kind, detail);
}

void RefusalLog::counted(const std::string& kind, const std::string& detail) { add(kind, detail); }

void RefusalLog::add(const std::string& kind, const std::string& detail) {
  ++total_;
  const absl::Time now = clock_();
  if (unreported_total_ == 0) since_ = now;
  ++unreported_[kind];
  ++unreported_total_;
  unreported_last_ = detail;
  if (now - since_ >= kInterval) flush();
}

void RefusalLog::tick() {
  if (unreported_total_ > 0 && clock_() - since_ >= kInterval) flush();
}

void RefusalLog::flush() {
  if (unreported_total_ == 0) return;
  std::string kinds;
  for (const auto& [kind, n] : unreported_) {
    absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", n, " ", kind);
  }
  sink_(absl::StrFormat("%s: refused %d connection%s in %.1f s: %s; last: %s", who_,
                        unreported_total_, unreported_total_ == 1 ? "" : "s",
                        absl::ToDoubleSeconds(clock_() - since_), kinds, unreported_last_));
  unreported_.clear();
  unreported_total_ = 0;
}

}  // namespace weft
