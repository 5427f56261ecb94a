// The rank side of the fault-injection test (fault_test.cc): what each rank process does,
// and the limits and exit codes the test and its ranks share. A rank runs
// create_from_env() (rank 0 serves the rendezvous at WEFT_COORDINATOR on a free loopback
// port), then runs a 16 MiB collective (or one of WEFT_FAULT_FLOATS floats) in a loop and
// appends its progress to a small per-rank file that the parent polls. When the first call
// fails, it writes one "error ..." line (status code, how long the failing call took, and
// when it failed on CLOCK_MONOTONIC, which is system-wide), shrinks, destroys the old
// communicator, runs the collective once on the survivors, reports "shrunk ..." and
// "survivors-exact", and exits with kExitCollectiveFailed. PR_SET_PDEATHSIG=SIGKILL and an alarm() end it whatever
// happens to the parent.
#pragma once

// however it ends. Every wait in the parent is bounded.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/base/env.hpp"
#include "src/unique_id.hpp"
#include "transport/shm/address.hpp"
#include "weft/weft.hpp"

extern char** environ;

namespace weft::fault_test {

inline constexpr int kRanks = 4;
inline constexpr int kTimeoutSeconds = 5;                 // WEFT_TIMEOUT of every child
inline constexpr int64_t kSlackMs = 2000;                 // on top of WEFT_TIMEOUT for the failing call
inline constexpr size_t kFloats = size_t{4} << 20;        // 16 MiB of float32 per allreduce
inline constexpr size_t kSmallFloats = 16;                // 64 B: the direct exchange on shm
// A child's loop ends once it has moved 1000 large calls' worth at the latest...
inline constexpr int64_t kMaxFloatsMoved = int64_t{1000} * kFloats;
inline constexpr int64_t kChildRunMs = 60'000;            // ...or after this long
inline constexpr unsigned kChildLifetimeSeconds = 120;    // alarm(): the hard backstop in each child
inline constexpr int64_t kProgressWaitMs = 30'000;        // parent: every rank has done 2 iterations
inline constexpr int kItersBeforeKill = 2;
inline constexpr int64_t kReapVictimMs = 5'000;           // parent: the SIGKILLed rank is gone
// parent: survivors exit: the failing call's deadline, shrink's probe of a stopped rank, slack
inline constexpr int64_t kSurvivorWaitMs = 2 * kTimeoutSeconds * 1000 + 15'000;

// Child exit codes. Only kExitCollectiveFailed is right for a survivor.
inline constexpr int kExitFinished = 0;          // the loop ended without an error
inline constexpr int kExitCollectiveFailed = 3;  // a call failed; shrink and the call after it worked
inline constexpr int kExitCreateFailed = 4;      // create_from_env failed
inline constexpr int kExitWrongResult = 5;       // the first allreduce was not exact
inline constexpr int kExitSetup = 6;             // bad child environment, cannot open the output file
inline constexpr int kExitParentGone = 7;        // the parent died before the child started
inline constexpr int kExitShrinkFailed = 8;      // shrink, or the collective after it, failed

inline int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
inline int64_t mono_ms() { return mono_ns() / 1'000'000; }

inline void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  nanosleep(&ts, nullptr);
}

// ------------------------------------------------------------------------------------------
// Child side.

// Element i of rank r's input. The sum over ranks is an integer below 2^24: exact in float.
inline float input_value(size_t i, int rank) { return static_cast<float>(i % 1024 + static_cast<size_t>(rank)); }

// Allgather sends only this rank's block of `send`, at global indices, so its result is
// input_value(i, owner of i); the other collectives send all of it. `send` holds the
// call's element count (kFloats, or WEFT_FAULT_FLOATS).
inline void fill_input(std::vector<float>& send, int rank) {
  for (size_t i = 0; i < send.size(); ++i) send[i] = input_value(i, rank);
}

// One call of `collective` on `comm` over in.size() floats; allgather moves (about) as much
// in all.
inline absl::Status run_collective(Communicator& comm, const std::string& collective,
                            std::vector<float>& in, std::vector<float>& out) {
  const auto rank = static_cast<size_t>(comm.rank());
  if (collective == "allgather") {
    const size_t block = in.size() / static_cast<size_t>(comm.size());
    return comm.allgather(in.data() + rank * block, out.data(), block, DataType::kFloat32);
  }
  if (collective == "broadcast") {
    return comm.broadcast(in.data(), out.data(), in.size(), DataType::kFloat32);
  }
  return comm.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32);
}

// Whether `out` holds the exact result of run_collective on `size` ranks; reports the first
// wrong element.
inline bool check_result(int fd, int rank, int size, const std::string& collective,
                  const std::vector<float>& out) {
  const size_t block = out.size() / static_cast<size_t>(size);
  const size_t n = collective == "allgather" ? block * static_cast<size_t>(size) : out.size();
  for (size_t i = 0; i < n; ++i) {
    float want;
    if (collective == "allgather") {
      want = input_value(i, static_cast<int>(i / block));
    } else if (collective == "broadcast") {
      want = input_value(i, 0);
    } else {  // sum over r of (i % 1024 + r)
      want = static_cast<float>(static_cast<size_t>(size) * (i % 1024) +
                                static_cast<size_t>(size * (size - 1) / 2));
    }
    if (out[i] != want) {
      std::fprintf(stderr, "fault child %d: %s result[%zu] = %g, want %g\n", rank,
                   collective.c_str(), i, out[i], want);
      dprintf(fd, "wrong-result index=%zu\n", i);
      return false;
    }
  }
  return true;
}

[[noreturn]] inline void child_exit(int fd, int code) {
  if (fd >= 0) ::close(fd);
  std::fflush(nullptr);
  ::_exit(code);
}

[[noreturn]] inline void child_main() {
  // Die with the parent (it might be killed by ctest's timeout), and in any case by the alarm.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The WEFT_FAULT_* variables are this test's own wiring between parent and children, not
  // settings of weft; they are read through read_env like every other variable.
  const auto parent = weft::read_env("WEFT_FAULT_PARENT");
  if (!parent || std::atol(parent->c_str()) != static_cast<long>(getppid())) {
    ::_exit(kExitParentGone);  // the parent died before PR_SET_PDEATHSIG took effect
  }
  alarm(kChildLifetimeSeconds);

  const auto out_env = weft::read_env("WEFT_FAULT_OUT");
  const auto rank_env = weft::read_env("WEFT_RANK");
  if (!out_env || !rank_env) {
    std::fprintf(stderr, "fault child: WEFT_FAULT_OUT and WEFT_RANK must be set\n");
    ::_exit(kExitSetup);
  }
  const char* out_path = out_env->c_str();
  const int rank = std::atoi(rank_env->c_str());
  // O_APPEND: each dprintf below is one write(2) of one whole line, which the parent polls.
  const int fd = ::open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "fault child %d: cannot open %s: %s\n", rank, out_path, std::strerror(errno));
    ::_exit(kExitSetup);
  }

  auto created = Communicator::create_from_env();
  if (!created.ok()) {
    std::fprintf(stderr, "fault child %d: create_from_env: %s\n", rank,
                 created.status().ToString().c_str());
    dprintf(fd, "create-failed code=%d\n", static_cast<int>(created.status().code()));
    child_exit(fd, kExitCreateFailed);
  }
  std::unique_ptr<Communicator> comm = *std::move(created);
  const std::string collective = weft::read_env("WEFT_FAULT_COLLECTIVE").value_or("allreduce");
  size_t floats = kFloats;
  if (auto f = weft::read_env("WEFT_FAULT_FLOATS"); f && !absl::SimpleAtoi(*f, &floats)) {
    std::fprintf(stderr, "fault child %d: WEFT_FAULT_FLOATS=%s is not a count\n", rank, f->c_str());
    child_exit(fd, kExitSetup);
  }
  // Allocated and touched once, before the loop.
  std::vector<float> send(floats), recv(floats, -1.0f);
  fill_input(send, rank);
  dprintf(fd, "ready pid=%d\n", static_cast<int>(getpid()));

  const int64_t stop_at = mono_ms() + kChildRunMs;
  const int64_t max_iterations = kMaxFloatsMoved / static_cast<int64_t>(std::max<size_t>(floats, 1));
  int iter = 0;
  int route_changes = 0;  // this rank's links isolated or back on probation, as health says
  for (; iter < max_iterations && mono_ms() < stop_at; ++iter) {
    const int64_t t0 = mono_ns();
    absl::Status s = run_collective(*comm, collective, send, recv);
    const int64_t t1 = mono_ns();
    if (!s.ok()) {
      std::fprintf(stderr, "fault child %d: %s #%d failed after %.3f s: %s\n", rank,
                   collective.c_str(), iter,
                   (t1 - t0) / 1e9, s.ToString().c_str());
      dprintf(fd, "error iter=%d code=%d call_ms=%" PRId64 " at_ns=%" PRId64 "\n", iter,
              static_cast<int>(s.code()), (t1 - t0) / 1'000'000, t1);
      std::string message(s.message());
      std::replace(message.begin(), message.end(), '\n', ' ');
      dprintf(fd, "message %s\n", message.c_str());
      // Carry on without the lost rank, as a training job would: shrink, then one call of the
      // same collective on the survivors, checked exactly.
      std::vector<int> dropped;
      auto next = comm->shrink(&dropped);
      const int64_t t2 = mono_ns();
      comm.reset();
      dprintf(fd, "destroyed at_ns=%" PRId64 "\n", mono_ns());
      if (!next.ok()) {
        std::fprintf(stderr, "fault child %d: shrink: %s\n", rank, next.status().ToString().c_str());
        dprintf(fd, "shrink-failed code=%d\n", static_cast<int>(next.status().code()));
        child_exit(fd, kExitShrinkFailed);
      }
      Communicator& survivors = **next;
      std::string dropped_list;
      for (int d : dropped) absl::StrAppend(&dropped_list, dropped_list.empty() ? "" : ",", d);
      dprintf(fd, "shrunk size=%d rank=%d dropped=%s shrink_ms=%" PRId64 "\n", survivors.size(),
              survivors.rank(), dropped_list.c_str(), (t2 - t1) / 1'000'000);
      fill_input(send, survivors.rank());
      std::fill(recv.begin(), recv.end(), -1.0f);
      s = run_collective(survivors, collective, send, recv);
      if (!s.ok()) {
        std::fprintf(stderr, "fault child %d: %s on the survivors: %s\n", rank, collective.c_str(),
                     s.ToString().c_str());
        child_exit(fd, kExitShrinkFailed);
      }
      if (!check_result(fd, rank, survivors.size(), collective, recv)) {
        child_exit(fd, kExitWrongResult);
      }
      dprintf(fd, "survivors-exact\n");
      // End as a job ends: the communicator goes first, so that what its links still owe a
      // slower survivor (the tail of this call) leaves before the process does.
      next->reset();
      child_exit(fd, kExitCollectiveFailed);
    }
    if (iter == 0 && !check_result(fd, rank, comm->size(), collective, recv)) {
      child_exit(fd, kExitWrongResult);
    }
    // Small calls run ~10^5 times a second: after the first few, progress is written at
    // powers of two only, so the file stays small and the writes do not pace the loop.
    const int done = iter + 1;
    if (done <= kItersBeforeKill || (done & (done - 1)) == 0) dprintf(fd, "iter %d\n", done);
    const int seen = route_changes;
    while (auto change = comm->next_health_change()) {
      route_changes += change->to == HealthState::kIsolated || change->to == HealthState::kProbation;
    }
    if (route_changes > seen && route_changes <= 8) dprintf(fd, "routes %d\n", route_changes);
  }
  dprintf(fd, "finished iters=%d\n", iter);
  comm.reset();
  child_exit(fd, kExitFinished);
}

}  // namespace weft::fault_test
