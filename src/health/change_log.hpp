// Where each state change goes as one JSON line (json.hpp): stderr, a file, or nowhere,
// as WEFT_HEALTH_LOG says. Written from the monitor's thread, one write(2) per line so
// lines from the ranks of a host sharing a file or a terminal never interleave.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/health/judge.hpp"

namespace weft::health {

class ChangeLog {
 public:
  /// `setting`: "stderr", "off", or a path ("%r" becomes `rank`), opened for appending.
  static absl::StatusOr<std::unique_ptr<ChangeLog>> open(const std::string& setting, int rank);
  ~ChangeLog();

  void write(const Change& change);

 private:
  ChangeLog(int fd, bool owned, int rank) : fd_(fd), owned_(owned), rank_(rank) {}
  int fd_;  // -1: off
  bool owned_;
  int rank_;
};

}  // namespace weft::health
