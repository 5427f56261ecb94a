#include "tools/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectives/reduce.hpp"
#include "tools/bench_report.hpp"
#include "tools/device_mirror.hpp"
#include "tools/host.hpp"
#include "tools/peer.hpp"
#include "tools/stop.hpp"
#include "tools/sweep.hpp"
#include "tools/tally.hpp"

namespace weft::tools {
namespace {

// This rank's failure, on one line of stderr that names the command and the rank.
void say_failed(const BenchOptions& o, int rank, const std::string& what) {
  std::fprintf(stderr, "weft %s: rank %d: %s\n", o.command, rank, what.c_str());
}

// The timed calls of a row run in rounds that cycle through its cells (weft out of place and
// in place, then the peer's), so a slow stretch of the machine (a stray process, or the
// scheduler moving ranks about when they outnumber cores) lands on every cell alike rather
// than on whichever happened to be running.
constexpr int kRounds = 5;

// The buffers the calls take: host memory, or device memory mirrored in it (--memory
// device). Inputs are written and results checked in the host buffers either way.
struct Memory {
  Buffers& host;
  DeviceMirror* device;  // null: the calls take the host buffers

  // Where a call reads and writes in the host buffers, and where the library is pointed.
  std::pair<Placement, Placement> place(const Call& call, int rank) {
    const Placement at = tools::place(call, host, rank);
    return {at, device != nullptr ? device->on_device(at, host) : at};
  }
};

// One cell of a row: a library and a placement.
struct Timing {
  int cell;  // in the row: 0-1 weft out of place / in place, 2-3 the peer's
  Peer* library;
  Call call;
  Placement host_at;  // where inputs are written and results checked
  Placement at;       // what the library is given: host_at, or its device mirror
  double us = 0;       // total over the rounds so far, then per call
  uint64_t wrong = 0;  // wrong elements over the check calls
};

// A call's exact inputs (and a poisoned result area) where the library reads them.
absl::Status write_inputs(const Timing& t, Memory& memory, int rank, int nranks) {
  prepare(t.call, t.host_at, rank, nranks);
  return memory.device != nullptr ? memory.device->upload(t.call, memory.host, nranks)
                                  : absl::OkStatus();
}

// This rank's result of the last call, in host memory.
absl::StatusOr<std::byte*> read_result(const Timing& t, Memory& memory, int rank, int nranks) {
  std::byte* result = t.library->result(t.call, t.at, rank);
  if (memory.device == nullptr) return result;
  return memory.device->download(t.call, result, memory.host, nranks);
}

// Inputs written, then `warmup` calls.
absl::Status warm_up(Timing& t, Communicator& comm, Memory& memory, int warmup) {
  absl::Status s = write_inputs(t, memory, comm.rank(), comm.size());
  for (int i = 0; i < warmup && s.ok(); ++i) s = t.library->run(t.call, t.at);
  if (s.ok()) s = t.library->finish();
  return s.ok() ? t.library->settle() : s;
}

// A barrier, then `iters` calls timed together and added to t.us; then, untimed, the library
// settles (Peer::settle) before the next cell may use another.
absl::Status time_calls(Timing& t, Communicator& comm, int iters) {
  absl::Status s = comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters && s.ok(); ++i) s = t.library->run(t.call, t.at);
  if (s.ok()) s = t.library->finish();
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
  t.us += took.count();
  return s.ok() ? t.library->settle() : s;
}

// `check` calls, each on fresh inputs, counted for wrong elements into t.wrong.
absl::Status check_calls(Timing& t, Communicator& comm, Memory& memory, const BenchOptions& o) {
  const int rank = comm.rank(), n = comm.size();
  absl::Status s;
  for (int i = 0; i < o.check && s.ok(); ++i) {
    s = write_inputs(t, memory, rank, n);
    if (s.ok()) s = t.library->run(t.call, t.at);
    if (s.ok()) s = t.library->finish();
    if (s.ok()) s = t.library->settle();
    if (!s.ok()) break;
    absl::StatusOr<std::byte*> read = read_result(t, memory, rank, n);
    if (!read.ok()) return read.status();
    std::byte* result = *read;
    const size_t elements = result_elements(t.call, n);
    if (o.self_test_corrupt && rank == n - 1 && elements > 0) {
      result[elements / 2 * size_of(t.call.type)] ^= std::byte{0x5A};
    }
    t.wrong += count_wrong(t.call, result, rank, n);
  }
  return s;
}

// The error of a failed call, naming the library, the collective and the placement.
absl::Status failed(const Timing& t, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(t.library->name(), " ", name_of(t.call.kind),
                                             t.call.in_place ? " in place" : "", ": ", s.message()));
}

// Times a row's cells (warm-up each, then the rounds), then checks each.
absl::Status measure(std::vector<Timing>& cells, Communicator& comm, Memory& memory,
                     const BenchOptions& o) {
  for (Timing& t : cells) {
    if (absl::Status s = warm_up(t, comm, memory, o.warmup); !s.ok()) return failed(t, s);
  }
  const int rounds = std::max(1, std::min(kRounds, o.iters));
  for (int r = 0; r < rounds; ++r) {
    // Round r takes its share of the iterations; the first rounds take the remainder.
    const int iters = o.iters / rounds + (r < o.iters % rounds ? 1 : 0);
    for (Timing& t : cells) {
      if (absl::Status s = time_calls(t, comm, iters); !s.ok()) return failed(t, s);
    }
  }
  for (Timing& t : cells) {
    t.us /= std::max(1, o.iters);
    if (absl::Status s = check_calls(t, comm, memory, o); !s.ok()) return failed(t, s);
  }
  return absl::OkStatus();
}

// One row: weft out of place and in place, then the peer the same way (when it has the
// call); times reduced to the slowest rank's, wrong elements summed. False when a call
// failed on any rank; each rank that saw a failure says why on stderr, once: its own
// call's, else the bookkeeping's (the other ranks' calls failed; they say why). *stop:
// whether any rank was asked to stop (stop.hpp), the same on every rank, so that all stop
// after this row.
bool measure_row(Communicator& comm, Peer& weft, Peer* peer, Memory& memory,
                 const BenchOptions& o, const Report& report, Row& row, bool* stop) {
  Peer* libraries[2] = {&weft, peer};
  const bool supported[2] = {true, peer != nullptr && peer->supports(row.call)};
  std::vector<Timing> cells;
  for (int i = 0; i < 4; ++i) {
    if (!supported[i / 2]) continue;
    Call call = row.call;
    call.in_place = i % 2 == 1;
    const auto [host_at, at] = memory.place(call, comm.rank());
    cells.push_back(Timing{i, libraries[i / 2], call, host_at, at});
  }
  double slowest[4] = {0, 0, 0, 0};
  // [4]: this rank's failed calls; [5]: whether it was asked to stop.
  uint64_t wrong[6] = {0, 0, 0, 0, 0, 0};
  const absl::Status measured = measure(cells, comm, memory, o);
  if (!measured.ok()) wrong[4] = 1;
  if (stop_requested()) wrong[5] = 1;
  for (const Timing& t : cells) {
    slowest[t.cell] = t.us;
    wrong[t.cell] = t.wrong;
  }
  // Every rank takes part even after its call failed, so that all learn to stop here.
  absl::Status tallied = max_in_place(comm, slowest, 4);
  if (tallied.ok()) tallied = sum_in_place(comm, wrong, 6);
  if (!measured.ok() || !tallied.ok()) {
    report.end_progress();
    say_failed(o, comm.rank(), measured.ok() ? tallied.ToString()
                                             : absl::StrFormat("at %zu bytes, %s", row.bytes,
                                                               measured.ToString()));
    return false;
  }
  if (wrong[4] != 0) return false;
  *stop = wrong[5] != 0;
  for (int i = 0; i < 4; ++i) {
    Cell& c = i < 2 ? row.weft[i] : row.peer[i - 2];
    c.supported = supported[i / 2];
    c.us = slowest[i];
    c.algbw = c.us > 0 ? static_cast<double>(row.bytes) / c.us / 1e3 : 0;
    c.busbw = c.algbw * bus_factor(row.call.kind, comm.size());
    c.checked = o.check > 0;
    c.wrong = wrong[i];
  }
  return true;
}

// What the footer reports, gathered row by row.
struct Totals {
  double busbw[2] = {0, 0};  // summed over rows and placements: [0] weft, [1] peer
  int cells[2] = {0, 0};
  // Per collective: the best out-of-place busbw (over types and ops) at the largest size.
  size_t large_bytes[kNumCollectiveKinds] = {};
  double large[kNumCollectiveKinds][2] = {};

  void add(const Row& row, bool largest) {
    for (int lib = 0; lib < 2; ++lib) {
      const Cell* cells_of = lib == 0 ? row.weft : row.peer;
      for (int placement = 0; placement < 2; ++placement) {
        if (!cells_of[placement].supported) continue;
        busbw[lib] += cells_of[placement].busbw;
        ++cells[lib];
      }
    }
    if (!largest) return;
    const int k = static_cast<int>(row.call.kind);
    large_bytes[k] = row.bytes;
    large[k][0] = std::max(large[k][0], row.weft[0].busbw);
    if (row.peer[0].supported) large[k][1] = std::max(large[k][1], row.peer[0].busbw);
  }
};

void print_header(const BenchOptions& o, Communicator& comm, const Peer* peer,
                  const DeviceMirror* device, double create_ms, double memcpy, double single_copy,
                  bool raised) {
  std::printf("# weft %s:", o.command);
  for (CollectiveKind k : o.collectives) std::printf(" %s", name_of(k));
  std::printf(" on %d ranks (%d on this host), weft %s, reduction kernels %s\n", comm.size(),
              comm.local_size(), WEFT_VERSION, reduce_isa());
  std::printf("# minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
              "check iters: %d root: %d compare: %s\n",
              o.min_bytes, o.max_bytes, o.factor > 1 ? o.factor : o.increment,
              o.factor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check, o.root,
              peer ? peer->name() : "none");
  std::printf("# communicator created in %.1f ms (slowest rank)\n", create_ms);
  if (device != nullptr) {
    std::printf("# buffers: %s (rank 0); times end when the stream is done\n",
                device->describe().c_str());
  }
  std::printf("# memcpy, one core on rank 0: %.2f GB/s (64 MiB buffers, best of 5)\n", memcpy);
  std::printf("# process_vm_readv (the shm single copy), one core on rank 0: %.2f GB/s "
              "(64 MiB in 256 KiB calls, best of 5)\n", single_copy);
  if (raised) {
    std::printf("# sizes below one element (per rank for allgather and reduce_scatter) are "
                "raised to one; the size column shows what ran\n");
  }
  if (o.self_test_corrupt) {
    std::printf("# self test: rank %d flips one result element before each check; this run "
                "must fail\n", comm.size() - 1);
  }
  std::printf("#\n");
}

void print_footer(const BenchOptions& o, const BenchOutcome& out, const Totals& t,
                  const Peer* peer, double memcpy, double resident_mib) {
  std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(out.wrong),
              out.wrong ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g\n", t.cells[0] ? t.busbw[0] / t.cells[0] : 0.0);
  if (peer != nullptr) {
    std::printf("# %s: out of bounds values : %llu %s, avg bus bandwidth : %g\n", peer->name(),
                static_cast<unsigned long long>(out.peer_wrong), out.peer_wrong ? "FAILED" : "OK",
                t.cells[1] ? t.busbw[1] / t.cells[1] : 0.0);
  }
  for (CollectiveKind k : o.collectives) {
    const int i = static_cast<int>(k);
    if (t.large_bytes[i] == 0 || memcpy <= 0) continue;
    std::printf("# %s at %zu B: busbw %.2f GB/s = %.2f x memcpy", name_of(k), t.large_bytes[i],
                t.large[i][0], t.large[i][0] / memcpy);
    if (peer != nullptr && t.large[i][1] > 0) {
      std::printf("; %s %.2f GB/s = %.2f x memcpy", peer->name(), t.large[i][1],
                  t.large[i][1] / memcpy);
    }
    std::printf("\n");
  }
  if (resident_mib >= 0) {
    std::printf("# resident beyond buffers: %.1f MiB (largest rank)\n", resident_mib);
  }
  std::printf("#\n");
}

}  // namespace

BenchOutcome run_bench(Job& job, const BenchOptions& o) {
  Communicator& comm = *job.comm;
  const int n = comm.size(), rank = comm.rank();
  const bool lead = rank == 0;
  BenchOutcome out;

  if (o.root < 0 || o.root >= n) {
    if (lead) std::fprintf(stderr, "weft %s: -r %d is not a rank of this %d-rank job\n", o.command, o.root, n);
    out.failed = true;
    out.bad_usage = true;
    return out;
  }
  // Resources each rank gets on its own; every rank learns whether all got them.
  const std::vector<size_t> sizes = sweep_sizes(o.min_bytes, o.max_bytes, o.factor, o.increment);
  int total_rows = 0;
  bool raised = false;
  size_t buffer_bytes = 0;  // a size raised to one element per rank may lie above -e
  for (CollectiveKind k : o.collectives) {
    for (DataType type : o.types) {
      const std::vector<size_t> counts = sweep_counts(k, sizes, type, n);
      total_rows += static_cast<int>((reduces(k) ? o.ops.size() : 1) * counts.size());
      for (size_t size : sizes) raised = raised || below_one_element(k, size, type, n);
      if (counts.empty()) continue;
      buffer_bytes = std::max(buffer_bytes, bytes_of(Call{k, type, {}, 0, counts.back()}, n));
    }
  }
  absl::StatusOr<Buffers> buffers = Buffers::allocate(buffer_bytes);
  std::unique_ptr<DeviceMirror> mirror;
  if (buffers.ok() && o.device_memory) {
    auto opened = DeviceMirror::open(buffers->bytes(), comm.local_rank());
    if (opened.ok()) mirror = std::move(*opened); else buffers = opened.status();
  }
  FILE* json = nullptr;
  if (buffers.ok() && lead && !o.json_path.empty()) {
    json = std::fopen(o.json_path.c_str(), "w");
    if (json == nullptr) buffers = absl::NotFoundError("cannot write -J " + o.json_path);
  }
  std::unique_ptr<FILE, int (*)(FILE*)> json_closer(json, [](FILE* f) { return f ? std::fclose(f) : 0; });
  if (!buffers.ok()) say_failed(o, rank, std::string(buffers.status().message()));
  const absl::StatusOr<uint64_t> short_of_buffers = total_over_ranks(comm, buffers.ok() ? 0 : 1);
  if (!short_of_buffers.ok()) say_failed(o, rank, short_of_buffers.status().ToString());
  if (!short_of_buffers.ok() || *short_of_buffers != 0) {
    out.failed = true;
    return out;
  }

  // The libraries. Every rank judges alike (NCCL's setup makes sure of it): only rank 0
  // reports why one cannot run.
  std::unique_ptr<Peer> weft = make_weft_peer(comm, mirror.get());
  std::unique_ptr<Peer> peer;
  absl::Status common;
  using Compare = BenchOptions::Compare;
  if (o.compare == Compare::kMpi) {
    auto made = make_mpi_peer(job.mpi);
    if (made.ok()) peer = std::move(*made); else common = made.status();
  } else if (o.compare == Compare::kNccl && mirror == nullptr) {
    common = absl::InvalidArgumentError("--compare nccl needs --memory device");
  } else if (o.compare == Compare::kNccl) {
    auto made = make_nccl_peer(comm, *mirror);
    if (made.ok()) peer = std::move(*made);
    else common = absl::Status(made.status().code(), absl::StrCat("--compare nccl: ", made.status().message()));
  } else if (o.compare == Compare::kHealthOff) {
    auto made = make_health_switched_peers(comm, mirror.get());
    if (made.ok()) {
      weft = std::move(made->on);
      peer = std::move(made->off);
    } else {
      common = made.status();
    }
  }
  if (!common.ok()) {
    if (lead) {
      std::fprintf(stderr, "weft %s: %s\n", o.command, std::string(common.message()).c_str());
    }
    out.failed = true;
    return out;
  }
  Memory memory{*buffers, mirror.get()};

  const absl::StatusOr<double> create_ms =
      max_over_ranks(comm, absl::ToDoubleMilliseconds(job.create_time));
  const double memcpy = lead ? memcpy_gbps() : 0;
  const double single_copy = lead ? process_vm_readv_gbps() : 0;
  // Rank 0 measured alone; the others wait for it here rather than inside a timed call.
  absl::Status ready = create_ms.status();
  if (ready.ok()) ready = comm.barrier();
  if (!ready.ok()) {
    say_failed(o, rank, ready.ToString());
    out.failed = true;
    return out;
  }
  const Report report(n, peer ? peer->name() : nullptr, json, lead && stdout_is_terminal(job.mpi));
  if (lead) {
    print_header(o, comm, peer.get(), mirror.get(), *create_ms, memcpy, single_copy, raised);
    report.print_columns();
  }

  Totals totals;
  // One sweep over every row; false when a call failed on any rank.
  const auto sweep = [&](bool* stop) {
    int row_index = 0;
    for (CollectiveKind kind : o.collectives) {
      if (lead && o.collectives.size() > 1) std::printf("# %s\n", name_of(kind));
      const std::vector<ReduceOp> ops = reduces(kind) ? o.ops : std::vector<ReduceOp>{ReduceOp::kSum};
      for (DataType type : o.types) {
        const std::vector<size_t> counts = sweep_counts(kind, sizes, type, n);
        for (ReduceOp op : ops) {
          for (size_t count : counts) {
            Row row;
            row.call = Call{kind, type, op, o.root, count, false};
            row.bytes = bytes_of(row.call, n);
            if (lead) report.progress(++row_index, total_rows, row.call, row.bytes);
            if (!measure_row(comm, *weft, peer.get(), memory, o, report, row, stop)) return false;
            totals.add(row, count == counts.back());
            out.wrong += row.weft[0].wrong + row.weft[1].wrong;
            out.peer_wrong += row.peer[0].wrong + row.peer[1].wrong;
            if (lead) report.print(row);
            if (*stop) return true;
          }
        }
      }
    }
    return true;
  };
  // -N: the sweep again and again (0: until a signal), so that a fault test sees busbw
  // before, during and after the fault; a signal ends it after the row under way.
  if (o.cycles != 1) catch_stop_signals();
  bool stop = false;
  for (int cycle = 1; !stop && (o.cycles == 0 || cycle <= o.cycles); ++cycle) {
    if (lead && o.cycles != 1) std::printf("# cycle %d\n", cycle);
    if (!sweep(&stop)) {
      out.failed = true;
      if (lead) std::printf("# stopped: a call failed (see the errors above)\n");
      return out;
    }
    if (stop && lead) {
      std::printf("# stopped by signal in cycle %d (SIGINT, SIGTERM or SIGUSR1 on a rank); the "
                  "footer counts the rows above\n", cycle);
    }
  }
  // Resident memory beyond the two buffers: weft's rings and relay, MPI's, the program's.
  const double resident = static_cast<double>(resident_bytes()) - 2.0 * static_cast<double>(buffers->bytes());
  const absl::StatusOr<double> largest = max_over_ranks(comm, resident);
  if (!largest.ok()) {
    say_failed(o, rank, largest.status().ToString());
    out.failed = true;
  }
  const double resident_mib = largest.ok() ? *largest / (1 << 20) : -1;
  // A host memcpy is no yardstick for device buffers.
  if (lead) print_footer(o, out, totals, peer.get(), mirror ? 0 : memcpy, resident_mib);
  return out;
}

}  // namespace weft::tools
