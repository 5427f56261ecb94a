// Which measured rank pairs are well below their peers: `weft diag probe`'s verdict. A cell is
// judged against the other cells of its class (same transport, link or single rail), repeat
// by repeat, so a slow moment of the whole machine moves the reference with it, and it is
// flagged only when most repeats agree, so one noisy repeat is not an alarm.
#pragma once

#include <string>
#include <vector>

namespace weft::tools::diag {

/// One measurement of one direction of one pair over one path.
struct Sample {
  double latency_us = 0;      ///< half the median round trip of small messages
  double bandwidth_GBps = 0;  ///< one way, 1e9 bytes per second
};

/// One directed pair over one path: from -> to, the whole link (path 0) or rail path - 1.
struct Cell {
  int from = 0;
  int to = 0;
  int path = 0;
  std::string klass;            ///< cells of one class are compared: "tcp", "shm", "tcp rail"
  std::vector<Sample> repeats;  ///< one per repeat of the whole schedule

  // Filled by judge().
  double latency_us = 0;  ///< median over repeats
  double bandwidth_GBps = 0;
  double class_latency_us = 0;  ///< the class's reference (median of the repeats' medians)
  double class_bandwidth_GBps = 0;
  std::string flag;         ///< "", "slow" or "high latency"
  double confidence = 0;    ///< share of repeats in which the cell was an outlier
};

struct OutlierOptions {
  /// Slow: bandwidth below this share of the class median.
  double threshold = 0.5;
  /// High latency: above the class median divided by `threshold`, and by at least this
  /// much (a few microseconds of scheduling noise on a 10 us loopback are not a fault).
  double latency_floor_us = 50;
  /// A class needs this many cells for a median to mean anything (two ranks: none).
  int min_class_cells = 3;
};

/// Judges every cell against its class (see the file comment). A cell is an outlier in a
/// repeat when below threshold x the class's upper median in that repeat (the upper of the
/// two middle values: one bad host of four slows half the links, and the reference must
/// still be a healthy one); it is flagged when it was an outlier in more than half of the
/// repeats. Returns the classes that were too small to judge.
std::vector<std::string> judge(std::vector<Cell>& cells, const OutlierOptions& options);

/// The upper median of `values` (empty: 0).
double upper_median(std::vector<double> values);

}  // namespace weft::tools::diag
