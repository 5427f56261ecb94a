// Fault injection: SIGKILL or SIGSTOP one rank of a 4-rank job in the middle of a large
// allreduce, allgather or broadcast and check that every surviving rank's call returns an
// error (Unavailable or DeadlineExceeded) within WEFT_TIMEOUT, that the survivors then shrink
// to a 3-rank communicator without the victim and get an exact result from the same
// collective on it, and that the job leaves no shared-memory ring behind. A stopped rank never closes
// anything, so only the deadline can end the survivors' wait: that is what SIGSTOP tests.
//
// The ranks are real processes, not threads: a rank must be killable on its own, and the
// transports detect a dead peer the way they would in production (shm: kill(pid, 0) and
// the rings' closed flags; tcp: the kernel resetting or closing the socket). mpirun is not
// used because it tears the whole job down when one rank dies.
//
// How the processes are made: the test re-executes its own binary (/proc/self/exe) with
// --gtest_filter=FaultChild.Workload and WEFT_FAULT_CHILD=1, so each child is a fresh
// process image (no fork of a process whose state we do not control). In the parent that
// test only skips. Every child runs create_from_env() (rank 0 serves the rendezvous at
// WEFT_COORDINATOR on a free loopback port), then allreduces a 16 MiB float buffer in a loop
// and appends its progress to a small per-child file that the parent polls. When the first
// call fails, the child writes one "error ..." line (status code, how long the failing call
// took, and when it failed on CLOCK_MONOTONIC, which is system-wide), shrinks, destroys the
// old communicator, runs the collective once on the survivors, reports "shrunk ..." and
// "survivors-exact", and exits with kExitCollectiveFailed.
//
// Nothing outlives the test: every child gets PR_SET_PDEATHSIG=SIGKILL and an alarm(), and
// a guard in the parent SIGKILLs and reaps every child still running when the test ends,
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
#include "src/env.hpp"
#include "src/unique_id.hpp"
#include "transport/shm/address.hpp"
#include "weft/weft.hpp"

extern char** environ;

namespace weft {
namespace {

constexpr int kRanks = 4;
constexpr int kTimeoutSeconds = 5;                 // WEFT_TIMEOUT of every child
constexpr int64_t kSlackMs = 2000;                 // on top of WEFT_TIMEOUT for the failing call
constexpr size_t kFloats = size_t{4} << 20;        // 16 MiB of float32 per allreduce
constexpr int kMaxIterations = 1000;               // a child's loop ends here at the latest...
constexpr int64_t kChildRunMs = 60'000;            // ...or after this long
constexpr unsigned kChildLifetimeSeconds = 120;    // alarm(): the hard backstop in each child
constexpr int64_t kProgressWaitMs = 30'000;        // parent: every rank has done 2 iterations
constexpr int kItersBeforeKill = 2;
constexpr int64_t kReapVictimMs = 5'000;           // parent: the SIGKILLed rank is gone
// parent: survivors exit: the failing call's deadline, shrink's probe of a stopped rank, slack
constexpr int64_t kSurvivorWaitMs = 2 * kTimeoutSeconds * 1000 + 15'000;

// Child exit codes. Only kExitCollectiveFailed is right for a survivor.
constexpr int kExitFinished = 0;          // the loop ended without an error
constexpr int kExitCollectiveFailed = 3;  // a call failed; shrink and the call after it worked
constexpr int kExitCreateFailed = 4;      // create_from_env failed
constexpr int kExitWrongResult = 5;       // the first allreduce was not exact
constexpr int kExitSetup = 6;             // bad child environment, cannot open the output file
constexpr int kExitParentGone = 7;        // the parent died before the child started
constexpr int kExitShrinkFailed = 8;      // shrink, or the collective after it, failed

int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}
int64_t mono_ms() { return mono_ns() / 1'000'000; }

void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  nanosleep(&ts, nullptr);
}

// ------------------------------------------------------------------------------------------
// Child side.

// Element i of rank r's input. The sum over ranks is an integer below 2^24: exact in float.
float input_value(size_t i, int rank) { return static_cast<float>(i % 1024 + static_cast<size_t>(rank)); }

// Allgather sends only this rank's block of `send`, at global indices, so its result is
// input_value(i, owner of i); the other collectives send all of it.
void fill_input(std::vector<float>& send, int rank) {
  for (size_t i = 0; i < send.size(); ++i) send[i] = input_value(i, rank);
}

// One call of `collective` on `comm`; allgather moves (about) the same 16 MiB in all.
absl::Status run_collective(Communicator& comm, const std::string& collective,
                            std::vector<float>& in, std::vector<float>& out) {
  const auto rank = static_cast<size_t>(comm.rank());
  if (collective == "allgather") {
    const size_t block = kFloats / static_cast<size_t>(comm.size());
    return comm.allgather(in.data() + rank * block, out.data(), block, DataType::kFloat32);
  }
  if (collective == "broadcast") {
    return comm.broadcast(in.data(), out.data(), kFloats, DataType::kFloat32);
  }
  return comm.allreduce(in.data(), out.data(), kFloats, DataType::kFloat32);
}

// Whether `out` holds the exact result of run_collective on `size` ranks; reports the first
// wrong element.
bool check_result(int fd, int rank, int size, const std::string& collective,
                  const std::vector<float>& out) {
  const size_t block = kFloats / static_cast<size_t>(size);
  const size_t n = collective == "allgather" ? block * static_cast<size_t>(size) : kFloats;
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

[[noreturn]] void child_exit(int fd, int code) {
  if (fd >= 0) ::close(fd);
  std::fflush(nullptr);
  ::_exit(code);
}

[[noreturn]] void child_main() {
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
  // Allocated and touched once, before the loop.
  std::vector<float> send(kFloats), recv(kFloats, -1.0f);
  fill_input(send, rank);
  dprintf(fd, "ready pid=%d\n", static_cast<int>(getpid()));

  const int64_t stop_at = mono_ms() + kChildRunMs;
  int iter = 0;
  for (; iter < kMaxIterations && mono_ms() < stop_at; ++iter) {
    const int64_t t0 = mono_ns();
    absl::Status s = run_collective(*comm, collective, send, recv);
    const int64_t t1 = mono_ns();
    if (!s.ok()) {
      std::fprintf(stderr, "fault child %d: %s #%d failed after %.3f s: %s\n", rank,
                   collective.c_str(), iter,
                   (t1 - t0) / 1e9, s.ToString().c_str());
      dprintf(fd, "error iter=%d code=%d call_ms=%" PRId64 " at_ns=%" PRId64 "\n", iter,
              static_cast<int>(s.code()), (t1 - t0) / 1'000'000, t1);
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
      child_exit(fd, kExitCollectiveFailed);
    }
    if (iter == 0 && !check_result(fd, rank, comm->size(), collective, recv)) {
      child_exit(fd, kExitWrongResult);
    }
    dprintf(fd, "iter %d\n", iter + 1);
  }
  dprintf(fd, "finished iters=%d\n", iter);
  comm.reset();
  child_exit(fd, kExitFinished);
}

// In the parent this test does nothing; the parent runs it in each child process.
TEST(FaultChild, Workload) {
  const auto child = weft::read_env("WEFT_FAULT_CHILD");
  if (!child || *child != "1") {
    GTEST_SKIP() << "runs only as a rank that FaultTest starts";
  }
  child_main();
}

// ------------------------------------------------------------------------------------------
// Parent side.

std::string read_file(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// What a child has written to its progress file so far (complete lines only).
struct Progress {
  int iterations = 0;
  bool ready = false;
  std::optional<std::map<std::string, std::string>> error;   // the "error k=v ..." line
  std::optional<std::map<std::string, std::string>> shrunk;  // the "shrunk k=v ..." line
  bool destroyed = false;
  bool survivors_exact = false;  // the call after shrink was exact
};

Progress parse_progress(const std::string& text) {
  Progress p;
  const size_t end = text.rfind('\n');
  if (end == std::string::npos) return p;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text).substr(0, end), '\n')) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty()) continue;
    if (words[0] == "ready") p.ready = true;
    if (words[0] == "destroyed") p.destroyed = true;
    if (words[0] == "iter" && words.size() == 2) {
      int n = 0;
      if (absl::SimpleAtoi(words[1], &n)) p.iterations = n;
    }
    if (words[0] == "survivors-exact") p.survivors_exact = true;
    if (words[0] == "error" || words[0] == "shrunk") {
      std::map<std::string, std::string> kv;
      for (size_t i = 1; i < words.size(); ++i) {
        std::vector<std::string> pair = absl::StrSplit(words[i], absl::MaxSplits('=', 1));
        if (pair.size() == 2) kv[pair[0]] = pair[1];
      }
      (words[0] == "error" ? p.error : p.shrunk) = std::move(kv);
    }
  }
  return p;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("wait status ", status);
}

// A loopback port nothing listens on right now (the kernel's pick for a socket we close).
uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// /dev/shm names that start with `prefix` (no leading slash).
std::set<std::string> shm_entries(const std::string& prefix) {
  std::set<std::string> out;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (absl::StartsWith(e->d_name, prefix)) out.insert(e->d_name);
  }
  ::closedir(d);
  return out;
}

struct Child {
  int rank = -1;
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;
  int64_t reaped_ms = 0;  // CLOCK_MONOTONIC, when the parent saw it exit
  std::string out_path;   // progress file
  std::string log_path;   // its stdout and stderr
};

// The job's children. The destructor SIGKILLs and reaps every child not yet reaped, and
// removes the scratch directory, whatever way the test ends.
class Job {
 public:
  Job() = default;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  ~Job() {
    for (Child& c : children) {
      if (c.pid > 0 && !c.reaped) {
        ::kill(c.pid, SIGKILL);
        int st = 0;
        while (::waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {
        }
        c.reaped = true;
      }
    }
    if (!dir.empty()) {
      for (const Child& c : children) {
        ::unlink(c.out_path.c_str());
        ::unlink(c.log_path.c_str());
      }
      ::rmdir(dir.c_str());
    }
  }

  // Reaps `c` if it has exited; true once it is reaped.
  bool poll(Child& c) {
    if (c.reaped) return true;
    int st = 0;
    const pid_t r = ::waitpid(c.pid, &st, WNOHANG);
    if (r == c.pid) {
      c.reaped = true;
      c.status = st;
      c.reaped_ms = mono_ms();
    }
    return c.reaped;
  }

  // What each child reported and printed, for a failing test's log. Progress lines are
  // summarised (there is one per iteration).
  std::string logs() const {
    std::string out;
    for (const Child& c : children) {
      const std::string progress = read_file(c.out_path);
      std::string other;
      int iterations = 0;
      for (absl::string_view line : absl::StrSplit(progress, '\n', absl::SkipEmpty())) {
        if (absl::StartsWith(line, "iter ")) {
          ++iterations;
        } else {
          absl::StrAppend(&other, "  ", line, "\n");
        }
      }
      absl::StrAppend(&out, "---- rank ", c.rank, " (pid ", c.pid, "): ",
                      c.reaped ? describe_wait_status(c.status) : std::string("still running"),
                      "; ", iterations, " allreduces completed; progress file:\n", other,
                      "---- rank ", c.rank, " stdout+stderr:\n", read_file(c.log_path));
    }
    return out;
  }

  std::string dir;
  std::vector<Child> children;
};

// Starts `exe` as a FaultChild with `overrides` on top of this process's environment, minus
// every variable that could steer the child elsewhere (other WEFT_ settings, launcher
// variables that create_from_env would prefer, gtest sharding and output).
absl::StatusOr<pid_t> spawn_child(const std::string& exe, const std::string& log_path,
                                  const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view v(*e);
    if (absl::StartsWith(v, "WEFT_DEBUG=")) {
      env.emplace_back(v);
      continue;
    }
    bool drop = false;
    for (const char* p : {"WEFT_", "GTEST_", "OMPI_", "PMIX_", "PMI_", "SLURM_", "MPI_LOCAL"}) {
      drop |= absl::StartsWith(v, p);
    }
    if (!drop) env.emplace_back(v);
  }
  for (const std::string& o : overrides) env.push_back(o);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string arg0 = exe, arg1 = "--gtest_filter=FaultChild.Workload";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("posix_spawn ", exe, ": ", std::strerror(rc)));
  }
  return pid;
}

struct FaultCase {
  const char* transport;
  int victim;
  int signal = SIGKILL;  // SIGKILL: the rank dies; SIGSTOP: it hangs, holding its links open
  const char* collective = "allreduce";
};
std::string case_name(const FaultCase& c) {
  return absl::StrCat(c.transport, c.signal == SIGSTOP ? "_stop_rank" : "_kill_rank", c.victim,
                      "_", c.collective);
}
// ctest's test names carry this (gtest_discover_tests appends GetParam()'s printout); without
// it they would show the struct's raw bytes, pointer and padding included.
void PrintTo(const FaultCase& c, std::ostream* os) { *os << case_name(c); }

class FaultTest : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultTest, OneRankLostMidCollectiveFailsEverySurvivorInTime) {
  const FaultCase fc = GetParam();
  ASSERT_LT(fc.victim, kRanks);

  char exe_buf[4096];
  const ssize_t exe_len = ::readlink("/proc/self/exe", exe_buf, sizeof exe_buf - 1);
  ASSERT_GT(exe_len, 0) << std::strerror(errno);
  const std::string exe(exe_buf, static_cast<size_t>(exe_len));

  const uint16_t port = free_loopback_port();
  ASSERT_NE(port, 0);
  const std::string coordinator = absl::StrCat("127.0.0.1:", port);

  // The job id every rank derives from WEFT_COORDINATOR names its shm rings: /weft-<id>-<rank>-...
  auto id = unique_id_for_coordinator(coordinator);
  ASSERT_TRUE(id.ok()) << id.status();
  auto decoded = decode_unique_id(*id);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  std::string shm_prefix = transport::shm::ring_prefix(decoded->job_id, 0);  // "/weft-<id>-0"
  shm_prefix = shm_prefix.substr(1, shm_prefix.size() - 2);                   // "weft-<id>-"
  const std::set<std::string> shm_before = shm_entries(shm_prefix);

  Job job;
  char dir_template[] = "/tmp/weft-fault-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr) << std::strerror(errno);
  job.dir = dir_template;
  // Declared after `job`, so it runs first: a failing test (ASSERT included) prints what every
  // child reported while the files still exist, before the guard kills and removes them.
  struct DumpOnFailure {
    const Job& job;
    ~DumpOnFailure() {
      if (::testing::Test::HasFailure()) std::printf("%s", job.logs().c_str());
      std::fflush(stdout);
    }
  } dump_on_failure{job};

  for (int r = 0; r < kRanks; ++r) {
    Child c;
    c.rank = r;
    c.out_path = absl::StrCat(job.dir, "/rank", r, ".progress");
    c.log_path = absl::StrCat(job.dir, "/rank", r, ".log");
    auto pid = spawn_child(exe, c.log_path,
                           {"WEFT_FAULT_CHILD=1", absl::StrCat("WEFT_FAULT_OUT=", c.out_path),
                            absl::StrCat("WEFT_FAULT_PARENT=", getpid()),
                            absl::StrCat("WEFT_RANK=", r), absl::StrCat("WEFT_SIZE=", kRanks),
                            absl::StrCat("WEFT_COORDINATOR=", coordinator),
                            absl::StrCat("WEFT_TRANSPORT=", fc.transport),
                            absl::StrCat("WEFT_FAULT_COLLECTIVE=", fc.collective),
                            absl::StrCat("WEFT_TIMEOUT=", kTimeoutSeconds),
                            "WEFT_SOCKET_IFNAME=lo"});
    ASSERT_TRUE(pid.ok()) << pid.status();
    c.pid = *pid;
    job.children.push_back(c);
  }

  // 1. Wait until every rank has completed kItersBeforeKill allreduces: links are open, the
  //    data flows, and each rank is inside (or about to enter) the next allreduce.
  const int64_t progress_deadline = mono_ms() + kProgressWaitMs;
  while (true) {
    int ready = 0;
    for (Child& c : job.children) {
      ASSERT_FALSE(job.poll(c)) << "rank " << c.rank << " exited before the kill";
      if (parse_progress(read_file(c.out_path)).iterations >= kItersBeforeKill) ++ready;
    }
    if (ready == kRanks) break;
    ASSERT_LT(mono_ms(), progress_deadline)
        << "not every rank completed " << kItersBeforeKill << " allreduces within "
        << kProgressWaitMs << " ms";
    sleep_ms(2);
  }

  // 2. Kill the victim and reap it at once. Reaping matters: until its parent waits for it,
  //    a dead process is a zombie, and kill(pid, 0) -- how the shm transport asks whether a
  //    peer lives (ShmPair::check_peer) -- still succeeds on a zombie. A launcher reaps its
  //    children too, so this is what a real job sees.
  Child& victim = job.children[fc.victim];
  std::map<int, int> iters_at_kill;
  for (Child& c : job.children) iters_at_kill[c.rank] = parse_progress(read_file(c.out_path)).iterations;
  const int64_t kill_ms = mono_ms();
  const int64_t kill_ns = mono_ns();
  ASSERT_EQ(::kill(victim.pid, fc.signal), 0) << std::strerror(errno);
  if (fc.signal == SIGKILL) {
    while (!job.poll(victim) && mono_ms() < kill_ms + kReapVictimMs) sleep_ms(1);
    ASSERT_TRUE(victim.reaped) << "rank " << victim.rank << " did not die within "
                               << kReapVictimMs << " ms of SIGKILL";
    ASSERT_TRUE(WIFSIGNALED(victim.status) && WTERMSIG(victim.status) == SIGKILL)
        << "rank " << victim.rank << ": " << describe_wait_status(victim.status);
  }

  // 3. Every survivor must fail and exit; poll them all so each is reaped (and so, for shm,
  //    visibly dead to the others) as soon as it exits.
  const int64_t survivor_deadline = kill_ms + kSurvivorWaitMs;
  while (mono_ms() < survivor_deadline) {
    bool all = true;
    for (Child& c : job.children) all &= (&c == &victim && !victim.reaped) || job.poll(c);
    if (all) break;
    sleep_ms(1);
  }

  // 4. Verdicts, one per survivor, plus a line of timings for the log.
  std::printf("[ fault    ] transport=%s %s: %s rank %d (pid %d) at iteration %d\n",
              fc.transport, fc.collective, fc.signal == SIGSTOP ? "stopped" : "killed",
              victim.rank, static_cast<int>(victim.pid), iters_at_kill[victim.rank] + 1);
  const int64_t limit_ms = kTimeoutSeconds * 1000 + kSlackMs;
  for (Child& c : job.children) {
    if (c.rank == victim.rank) continue;
    SCOPED_TRACE(absl::StrCat("transport ", fc.transport, ", victim rank ", victim.rank,
                              ", survivor rank ", c.rank));
    if (!c.reaped) {
      ADD_FAILURE() << "rank " << c.rank << " still running " << kSurvivorWaitMs
                    << " ms after rank " << victim.rank << " was killed (hang)";
      continue;
    }
    const Progress p = parse_progress(read_file(c.out_path));
    EXPECT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == kExitCollectiveFailed)
        << "rank " << c.rank << ": " << describe_wait_status(c.status) << ", want exit code "
        << kExitCollectiveFailed << " (a " << fc.collective << " returned an error)";
    if (!p.error.has_value()) {
      ADD_FAILURE() << "rank " << c.rank << " reported no failed " << fc.collective;
      continue;
    }
    const std::map<std::string, std::string>& e = *p.error;
    int code = -1, failed_iter = -1;
    int64_t call_ms = -1, at_ns = 0;
    EXPECT_TRUE(e.count("code") && absl::SimpleAtoi(e.at("code"), &code) &&
                e.count("call_ms") && absl::SimpleAtoi(e.at("call_ms"), &call_ms) &&
                e.count("at_ns") && absl::SimpleAtoi(e.at("at_ns"), &at_ns) &&
                e.count("iter") && absl::SimpleAtoi(e.at("iter"), &failed_iter))
        << "malformed error line";
    const auto status_code = static_cast<absl::StatusCode>(code);
    EXPECT_TRUE(status_code == absl::StatusCode::kUnavailable ||
                status_code == absl::StatusCode::kDeadlineExceeded)
        << "rank " << c.rank << " failed with " << absl::StatusCodeToString(status_code)
        << ", want Unavailable or DeadlineExceeded";
    // The failing call began before the kill (or right after), so its duration bounds how
    // long this rank took to notice; both must fit in WEFT_TIMEOUT plus slack.
    const int64_t detect_ms = (at_ns - kill_ns) / 1'000'000;
    EXPECT_LE(call_ms, limit_ms) << "rank " << c.rank << "'s failing " << fc.collective << " took " << call_ms
                                 << " ms (WEFT_TIMEOUT=" << kTimeoutSeconds << " s)";
    EXPECT_LE(detect_ms, limit_ms) << "rank " << c.rank << " failed " << detect_ms
                                   << " ms after the kill";
    EXPECT_GE(failed_iter, kItersBeforeKill) << "rank " << c.rank << " failed before the kill";
    EXPECT_TRUE(p.destroyed) << "rank " << c.rank << " did not finish destroying its communicator";
    // Shrink: every survivor drops exactly the victim, keeps its order, and the call on the
    // survivors is exact.
    int new_size = -1, new_rank = -1;
    int64_t shrink_ms = -1;
    if (!p.shrunk.has_value()) {
      ADD_FAILURE() << "rank " << c.rank << " did not shrink";
    } else {
      const std::map<std::string, std::string>& k = *p.shrunk;
      EXPECT_TRUE(k.count("size") && absl::SimpleAtoi(k.at("size"), &new_size) &&
                  k.count("rank") && absl::SimpleAtoi(k.at("rank"), &new_rank) &&
                  k.count("shrink_ms") && absl::SimpleAtoi(k.at("shrink_ms"), &shrink_ms) &&
                  k.count("dropped"))
          << "malformed shrunk line";
      EXPECT_EQ(new_size, kRanks - 1);
      EXPECT_EQ(new_rank, c.rank < victim.rank ? c.rank : c.rank - 1);
      EXPECT_EQ(k.count("dropped") ? k.at("dropped") : "", absl::StrCat(victim.rank));
      EXPECT_LE(shrink_ms, 2 * kTimeoutSeconds * 1000 + kSlackMs) << "shrink's bound";
      EXPECT_TRUE(p.survivors_exact) << "rank " << c.rank << ": no exact " << fc.collective
                                     << " on the survivors";
    }
    std::printf("[ fault    ]   survivor rank %d: %s after %" PRId64
                " ms in %s #%d; failed %" PRId64 " ms after the kill; shrank to rank %d of %d"
                " in %" PRId64 " ms; exited %" PRId64 " ms after the kill (%s)\n",
                c.rank, absl::StatusCodeToString(status_code).c_str(), call_ms, fc.collective,
                failed_iter + 1, detect_ms, new_rank, new_size, shrink_ms, c.reaped_ms - kill_ms,
                describe_wait_status(c.status).c_str());
  }
  std::fflush(stdout);

  // 5. No ring of this job may stay in /dev/shm: each ring's name is unlinked as soon as both
  //    sides have attached, so even a SIGKILLed rank leaves none. Names that were there
  //    before the job started (a leftover of an earlier crashed run on the same port) are not
  //    this job's doing; they are reported, not counted.
  for (const std::string& name : shm_before) {
    std::printf("[ fault    ] note: /dev/shm/%s existed before this job started\n", name.c_str());
  }
  std::set<std::string> left;
  for (const std::string& name : shm_entries(shm_prefix)) {
    if (!shm_before.count(name)) left.insert(name);
  }
  std::string left_list;
  for (const std::string& name : left) absl::StrAppend(&left_list, " /dev/shm/", name);
  EXPECT_TRUE(left.empty()) << "shared-memory rings of this job left behind:" << left_list;
  // Remove them anyway so a failing run does not leak into the next one.
  for (const std::string& name : left) ::unlink(absl::StrCat("/dev/shm/", name).c_str());
}

INSTANTIATE_TEST_SUITE_P(
    KillOneOfFour, FaultTest,
    ::testing::Values(FaultCase{"shm", 2}, FaultCase{"shm", 0}, FaultCase{"tcp", 2},
                      FaultCase{"tcp", 0}, FaultCase{"shm", 1, SIGKILL, "allgather"},
                      FaultCase{"tcp", 1, SIGKILL, "allgather"},
                      FaultCase{"shm", 3, SIGKILL, "broadcast"},
                      FaultCase{"tcp", 3, SIGKILL, "broadcast"}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return case_name(info.param); });

// A stopped rank keeps its sockets and rings open: only the survivors' deadlines end it.
INSTANTIATE_TEST_SUITE_P(
    StopOneOfFour, FaultTest,
    ::testing::Values(FaultCase{"shm", 2, SIGSTOP, "allreduce"},
                      FaultCase{"tcp", 2, SIGSTOP, "allreduce"},
                      FaultCase{"shm", 1, SIGSTOP, "allgather"},
                      FaultCase{"tcp", 1, SIGSTOP, "allgather"},
                      FaultCase{"shm", 3, SIGSTOP, "broadcast"},
                      FaultCase{"tcp", 3, SIGSTOP, "broadcast"}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return case_name(info.param); });

}  // namespace
}  // namespace weft
