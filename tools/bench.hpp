// The bench engine behind `weft bench` and `weft run`: a sweep over collectives, types, ops
// and sizes; per size, weft out of place and in place, then the compared library the same
// way; each timed over n iterations after a barrier and checked on c extra iterations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/job.hpp"
#include "weft/types.hpp"

namespace weft::tools {

/// Every flag of `weft bench`, with nccl-tests' defaults.
struct BenchOptions {
  std::vector<CollectiveKind> collectives = {CollectiveKind::kAllreduce};
  std::vector<DataType> types = {DataType::kFloat32};
  std::vector<ReduceOp> ops = {ReduceOp::kSum};
  size_t min_bytes = size_t{32} << 20;
  size_t max_bytes = size_t{32} << 20;
  size_t factor = 1;                   ///< above 1: sizes grow by this factor
  size_t increment = size_t{1} << 20;  ///< else by this many bytes
  int iters = 20;
  int warmup = 5;
  int check = 1;  ///< checked iterations per size and placement; 0: no check
  int root = 0;
  int cycles = 1;  ///< -N: how many times to run the whole sweep; 0: until stopped
  /// --compare: the library timed beside weft in the same run. kHealthOff is weft itself
  /// with its health monitor paused; kNccl needs device memory.
  enum class Compare { kNone, kMpi, kHealthOff, kNccl } compare = Compare::kNone;
  /// --memory device: the calls take device buffers, ordered on a stream (device_mirror.hpp)
  bool device_memory = false;
  bool memory_given = false;  ///< --memory was on the command line
  std::string json_path;           ///< -J: one JSON object per line, empty for none
  bool self_test_corrupt = false;  ///< flip one result element on the last rank
  const char* command = "bench";   ///< for messages: "weft bench: ..."
};

struct BenchOutcome {
  uint64_t wrong = 0;       ///< weft's wrong elements, all ranks
  uint64_t peer_wrong = 0;  ///< the compared library's
  bool failed = false;      ///< a call, an allocation or the setup failed
  bool bad_usage = false;   ///< refused before anything ran (exit status 2)
  bool ok() const { return wrong == 0 && peer_wrong == 0 && !failed; }
  /// The command's exit status: 0, 1 for a failure or a wrong result, 2 for bad usage.
  int exit_status() const { return bad_usage ? 2 : ok() ? 0 : 1; }
};

/// Runs the sweep on every rank of `job`; rank 0 prints the table and its footer.
BenchOutcome run_bench(Job& job, const BenchOptions& options);

}  // namespace weft::tools
