// Fault injection: SIGKILL or SIGSTOP one rank of a 4-rank job in the middle of a large
// allreduce, allgather or broadcast (or a loop of 64-byte ones, which take the direct
// exchange on shm) and check that every surviving rank's call returns an error
// (Unavailable or DeadlineExceeded) within WEFT_TIMEOUT (a SIGKILLed rank well before it:
// the transports see it gone, so no survivor may sit out its deadline), that the survivors then shrink
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
// test only skips. What a rank does is in fault_rank.hpp; starting and watching the ranks
// in fault_job.hpp.
#include "tests/unit/fault_job.hpp"

namespace weft {
namespace {

using namespace fault_test;  // NOLINT: the harness reads as part of the test

// In the parent this test does nothing; the parent runs it in each child process.
TEST(FaultChild, Workload) {
  const auto child = weft::read_env("WEFT_FAULT_CHILD");
  if (!child || *child != "1") {
    GTEST_SKIP() << "runs only as a rank that FaultTest starts";
  }
  child_main();
}

struct FaultCase {
  const char* transport;
  int victim;
  int signal = SIGKILL;  // SIGKILL: the rank dies; SIGSTOP: it hangs, holding its links open
  const char* collective = "allreduce";
  size_t floats = kFloats;  // per call
  // Every link judged FAILING all the time and back at once (docs/HEALTH.md, "Isolation"):
  // nearly every call changes the route epoch, so the victim dies during one.
  bool churn_routes = false;
};
std::string case_name(const FaultCase& c) {
  return absl::StrCat(c.transport, c.signal == SIGSTOP ? "_stop_rank" : "_kill_rank", c.victim,
                      "_", c.collective, c.floats == kFloats ? "" : absl::StrCat("_", c.floats * 4, "B"),
                      c.churn_routes ? "_during_route_changes" : "");
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

  std::vector<std::string> churn;
  if (fc.churn_routes) {
    churn = {"WEFT_HEALTH=on", "WEFT_HEALTH_INTERVAL_MS=10", "WEFT_HEALTH_LOG=off",
             "WEFT_HEALTH_THRESHOLDS=link_bytes_sent=-/1", "WEFT_ISOLATE=on",
             "WEFT_ISOLATE_QUIET=0"};
  }
  for (int r = 0; r < kRanks; ++r) {
    Child c;
    c.rank = r;
    c.out_path = absl::StrCat(job.dir, "/rank", r, ".progress");
    c.log_path = absl::StrCat(job.dir, "/rank", r, ".log");
    std::vector<std::string> env = churn;
    env.insert(env.end(),
                           {"WEFT_FAULT_CHILD=1", absl::StrCat("WEFT_FAULT_OUT=", c.out_path),
                            absl::StrCat("WEFT_FAULT_PARENT=", getpid()),
                            absl::StrCat("WEFT_RANK=", r), absl::StrCat("WEFT_SIZE=", kRanks),
                            absl::StrCat("WEFT_COORDINATOR=", coordinator),
                            absl::StrCat("WEFT_TRANSPORT=", fc.transport),
                            absl::StrCat("WEFT_FAULT_COLLECTIVE=", fc.collective),
                            absl::StrCat("WEFT_FAULT_FLOATS=", fc.floats),
                            absl::StrCat("WEFT_TIMEOUT=", kTimeoutSeconds),
                            "WEFT_SOCKET_IFNAME=lo"});
    auto pid = spawn_child(exe, c.log_path, env);
    ASSERT_TRUE(pid.ok()) << pid.status();
    c.pid = *pid;
    job.children.push_back(c);
  }

  // 1. Wait until every rank has completed kItersBeforeKill calls: links are open, the
  //    data flows, and each rank is inside (or about to enter) the next allreduce.
  const int64_t progress_deadline = mono_ms() + kProgressWaitMs;
  while (true) {
    int ready = 0;
    for (Child& c : job.children) {
      ASSERT_FALSE(job.poll(c)) << "rank " << c.rank << " exited before the kill";
      const Progress p = parse_progress(read_file(c.out_path));
      // Churning, the kill waits for route changes under way on every rank.
      if (p.iterations >= kItersBeforeKill && (!fc.churn_routes || p.route_changes >= 2)) ++ready;
    }
    if (ready == kRanks) break;
    ASSERT_LT(mono_ms(), progress_deadline)
        << "not every rank completed " << kItersBeforeKill << " calls within "
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
  std::printf("[ fault    ] transport=%s %s: %s rank %d (pid %d) after %d calls or more\n",
              fc.transport, fc.collective, fc.signal == SIGSTOP ? "stopped" : "killed",
              victim.rank, static_cast<int>(victim.pid), iters_at_kill[victim.rank]);
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
    // Blame: every survivor names the victim, stopped or gone, and says whether it saw so
    // itself or heard it from another rank; a healthy rank named instead fails here.
    const std::string named = absl::StrCat("rank ", victim.rank,
                                           fc.signal == SIGSTOP ? " stopped answering (rank "
                                                                : " is gone (rank ",
                                           c.rank);
    EXPECT_TRUE(absl::StartsWith(p.message, absl::StrCat("rank ", c.rank, ": ", named)) &&
                (absl::StrContains(p.message, " saw it") || absl::StrContains(p.message, " heard it")))
        << "rank " << c.rank << " does not name rank " << victim.rank << " as the rank at fault: "
        << p.message;
    // The failing call began before the kill (or right after), so its duration bounds how
    // long this rank took to notice; both must fit in WEFT_TIMEOUT plus slack.
    const int64_t detect_ms = (at_ns - kill_ns) / 1'000'000;
    EXPECT_LE(call_ms, limit_ms) << "rank " << c.rank << "'s failing " << fc.collective << " took " << call_ms
                                 << " ms (WEFT_TIMEOUT=" << kTimeoutSeconds << " s)";
    EXPECT_LE(detect_ms, limit_ms) << "rank " << c.rank << " failed " << detect_ms
                                   << " ms after the kill";
    // A dead peer is seen by a liveness check (closed rings, kill(pid, 0), a reset socket)
    // within milliseconds. Failing only at the deadline means a wait looked at the wrong link.
    if (fc.signal == SIGKILL) {
      EXPECT_LT(detect_ms, kTimeoutSeconds * 1000 / 2)
          << "rank " << c.rank << " noticed the killed rank only near its deadline";
    }
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
    std::printf("[ fault    ]     its message: %s\n", p.message.c_str());
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
                      FaultCase{"tcp", 3, SIGKILL, "broadcast"},
                      FaultCase{"shm", 1, SIGKILL, "allreduce", kSmallFloats},
                      FaultCase{"shm", 2, SIGKILL, "allgather", kSmallFloats},
                      FaultCase{"tcp", 1, SIGKILL, "allreduce", kSmallFloats}
#ifdef WEFT_HAVE_UCX
                      ,
                      FaultCase{"ucx", 2}, FaultCase{"ucx", 1, SIGKILL, "allgather"},
                      FaultCase{"ucx", 3, SIGKILL, "broadcast"}
#endif
                      ),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return case_name(info.param); });

// The victim dies while the ranks change their route at nearly every call (issue 22): the
// survivors fail in time and shrink as ever; nothing waits on a route change.
INSTANTIATE_TEST_SUITE_P(
    KillDuringRouteChanges, FaultTest,
    ::testing::Values(FaultCase{"tcp", 2, SIGKILL, "allreduce", kFloats, true},
                      FaultCase{"shm", 1, SIGKILL, "allreduce", kSmallFloats, true}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return case_name(info.param); });

// A stopped rank keeps its sockets and rings open: only the survivors' deadlines end it.
INSTANTIATE_TEST_SUITE_P(
    StopOneOfFour, FaultTest,
    ::testing::Values(FaultCase{"shm", 2, SIGSTOP, "allreduce"},
                      FaultCase{"tcp", 2, SIGSTOP, "allreduce"},
#ifdef WEFT_HAVE_UCX
                      FaultCase{"ucx", 2, SIGSTOP, "allreduce"},
#endif
                      FaultCase{"shm", 1, SIGSTOP, "allgather"},
                      FaultCase{"tcp", 1, SIGSTOP, "allgather"},
                      FaultCase{"shm", 3, SIGSTOP, "broadcast"},
                      FaultCase{"tcp", 3, SIGSTOP, "broadcast"}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return case_name(info.param); });

}  // namespace
}  // namespace weft
