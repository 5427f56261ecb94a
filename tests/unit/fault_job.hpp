// The parent side of the fault-injection test (fault_test.cc): starting the rank processes
// (the test binary re-executed as FaultChild.Workload), reading their progress files,
// reaping them, and the Job guard that SIGKILLs and reaps every child still running and
// removes the scratch directory however the test ends. Every wait is bounded.
#pragma once

#include "tests/unit/fault_rank.hpp"
#include "tests/unit/free_port.hpp"

namespace weft::fault_test {

inline std::string read_file(const std::string& path) {
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
  int route_changes = 0;  // the "routes N" lines: this rank's links isolated or back
  bool ready = false;
  std::optional<std::map<std::string, std::string>> error;   // the "error k=v ..." line
  std::optional<std::map<std::string, std::string>> shrunk;  // the "shrunk k=v ..." line
  bool destroyed = false;
  bool survivors_exact = false;  // the call after shrink was exact
  std::string message;           // the failed call's message (the "message ..." line)
};

inline Progress parse_progress(const std::string& text) {
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
    if (words[0] == "routes" && words.size() == 2) {
      int n = 0;
      if (absl::SimpleAtoi(words[1], &n)) p.route_changes = n;
    }
    if (words[0] == "survivors-exact") p.survivors_exact = true;
    if (words[0] == "message") p.message = std::string(line.substr(line.find(' ') + 1));
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

inline std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("wait status ", status);
}

using weft::testing::free_loopback_port;

// /dev/shm names that start with `prefix` (no leading slash).
inline std::set<std::string> shm_entries(const std::string& prefix) {
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
  // summarised by the last count they give.
  std::string logs() const {
    std::string out;
    for (const Child& c : children) {
      const std::string progress = read_file(c.out_path);
      std::string other;
      for (absl::string_view line : absl::StrSplit(progress, '\n', absl::SkipEmpty())) {
        if (!absl::StartsWith(line, "iter ")) {
          absl::StrAppend(&other, "  ", line, "\n");
        }
      }
      absl::StrAppend(&out, "---- rank ", c.rank, " (pid ", c.pid, "): ",
                      c.reaped ? describe_wait_status(c.status) : std::string("still running"),
                      "; ", parse_progress(progress).iterations,
                      " calls completed at least; progress file:\n", other,
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
inline absl::StatusOr<pid_t> spawn_child(const std::string& exe, const std::string& log_path,
                                  const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view v(*e);
    if (absl::StartsWith(v, "WEFT_DEBUG=") || absl::StartsWith(v, "WEFT_JOB_SECRET_FILE=")) {
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

}  // namespace weft::fault_test
