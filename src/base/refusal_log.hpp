// Refused connections, logged so that strangers cannot set the log's volume.
//
// A listener that anyone can reach meets port scanners, other jobs and floods. Each refusal
// used to be one line (437 lines per rank under a connection flood), while connections that
// stayed silent or closed without a byte were never reported at all. Now the first few
// refusals are logged in full, then at most one summary line per interval counts what came
// since, by kind ("refused 24592 connections in 10.0 s: 24000 not a weft hello, 592 a wrong
// proof; last: ..."), and what is still unreported is summarised when the log is destroyed.
// Silent and truncated connections are only ever counted into summaries: they carry nothing
// worth a line of their own, and a liveness probe (shrink's) looks the same.
//
// Not thread-safe: its owner serialises calls (the listener runs under its transport's mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/time/time.h"

namespace weft {

class RefusalLog {
 public:
  /// Where lines go (stderr, prefixed "weft: warning: ", by default) and what "now" is.
  using Sink = std::function<void(const std::string& line)>;
  using Clock = std::function<absl::Time()>;

  static constexpr int kFullLines = 5;
  static constexpr absl::Duration kInterval = absl::Seconds(10);

  /// `who` starts every line: "tcp: rank 2 (127.0.0.1:4000)", "rendezvous 127.0.0.1:29500".
  explicit RefusalLog(std::string who, Sink sink = {}, Clock clock = {});
  ~RefusalLog();
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;

  /// A connection refused for a reason worth reading: `kind` counts it in summaries ("not a
  /// weft hello"), `detail` is its full line (who, from where, why).
  void refused(const std::string& kind, const std::string& detail);
  /// A connection that said nothing useful (silent, truncated, closed at once): counted only.
  void counted(const std::string& kind, const std::string& detail);

  /// Prints the summary once its interval is over, even when no connection comes to
  /// trigger it (the owner calls this now and then).
  void tick();
  /// Prints the summary of whatever is unreported now (a listener that closes).
  void flush();

  /// The last refusal's detail, for timeout messages ("" when none).
  const std::string& last() const { return last_; }
  uint64_t total() const { return total_; }

 private:
  void add(const std::string& kind, const std::string& detail);

  const std::string who_;
  Sink sink_;
  Clock clock_;
  int full_lines_ = 0;
  uint64_t total_ = 0;
  std::map<std::string, uint64_t> unreported_;  // by kind, since the last summary
  uint64_t unreported_total_ = 0;
  std::string unreported_last_;
  absl::Time since_;  // start of the unreported stretch
  std::string last_;
};

}  // namespace weft
