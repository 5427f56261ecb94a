// How `weft bench` shows its results: nccl-tests' table on stdout (with the peer's columns
// when comparing), one JSON object per line in the -J file, and a progress line, also on
// stdout, when stdout is a terminal. Rank 0 only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "tools/sweep.hpp"

namespace weft::tools {

/// One library's result for one placement, already reduced over the ranks.
struct Cell {
  bool supported = true;  ///< false: the library has no such call ("n/a")
  double us = 0;          ///< mean time per call, the slowest rank's
  double algbw = 0;       ///< GB/s
  double busbw = 0;       ///< GB/s
  bool checked = false;   ///< false with -c 0: #wrong is "N/A"
  uint64_t wrong = 0;     ///< wrong elements summed over the ranks
};

/// One line of the table: a call (its out-of-place form) and four cells.
struct Row {
  Call call;
  size_t bytes = 0;
  Cell weft[2];  ///< [0] out of place, [1] in place
  Cell peer[2];
};

class Report {
 public:
  /// `peer` is the compared library's name, or nullptr; `json` may be null.
  Report(int nranks, const char* peer, FILE* json, bool progress);

  /// The three header lines of the table.
  void print_columns() const;
  /// "\r[k/total] ..." on stdout, when progress is on (stdout is a terminal).
  void progress(int k, int total, const Call& call, size_t bytes) const;
  /// Clears the progress line, so that a row, or a message on stderr, starts a line of its own.
  void end_progress() const;
  /// The row on stdout and as one JSON line.
  void print(const Row& row) const;

 private:
  int nranks_;
  const char* peer_;
  FILE* json_;
  bool progress_;
};

/// `value` in `width` characters with as many decimals (2, 1, 0) as fit, as nccl-tests.
std::string fit(double value, int width);

}  // namespace weft::tools
