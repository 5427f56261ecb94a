#include "tools/health/fetch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace weft::tools::health {
namespace {

absl::StatusOr<std::string> get_here(const Endpoint& e, const std::string& path,
                                     absl::Duration timeout) {
  httplib::Client client(e.host, e.port);
  const auto usec = absl::ToInt64Microseconds(timeout);
  client.set_connection_timeout(usec / 1000000, usec % 1000000);
  client.set_read_timeout(usec / 1000000, usec % 1000000);
  auto res = client.Get(path);
  if (!res) {
    return absl::UnavailableError(absl::StrCat("no answer on ", e.name(), " (",
                                               httplib::to_string(res.error()), ")"));
  }
  if (res->status != 200) {
    return absl::NotFoundError(absl::StrCat(e.name(), path, ": HTTP ", res->status));
  }
  return res->body;
}

}  // namespace

std::string Endpoint::name() const {
  return absl::StrCat(netns.empty() ? host : netns, ":", port);
}

absl::StatusOr<std::string> http_get(const Endpoint& e, const std::string& path,
                                     absl::Duration timeout) {
  if (e.netns.empty()) return get_here(e, path, timeout);
  // Another namespace: a child enters it (setns changes the whole thread's network), fetches
  // and writes back "status byte + body" through a pipe.
  const std::string ns_path = "/var/run/netns/" + e.netns;
  const int ns = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) {
    return absl::NotFoundError(absl::StrCat("network namespace ", e.netns, ": ",
                                            std::strerror(errno), " (is the cluster up?)"));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    close(ns);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    if (setns(ns, CLONE_NEWNET) != 0) {
      out = absl::StrCat("E", "cannot enter network namespace ", e.netns, ": ",
                         std::strerror(errno), " (root needed)");
    } else {
      auto body = get_here(e, path, timeout);
      out = body.ok() ? "O" + *body : "E" + std::string(body.status().message());
    }
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(ns);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  std::string out;
  const absl::Time deadline = absl::Now() + timeout + absl::Seconds(1);
  for (char buf[65536];;) {
    pollfd p{fds[0], POLLIN, 0};
    const int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (left <= 0 || poll(&p, 1, left) <= 0) break;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  kill(pid, SIGKILL);  // done or late: either way it has nothing more to say
  waitpid(pid, nullptr, 0);
  if (out.empty()) return absl::DeadlineExceededError(absl::StrCat(e.name(), path, ": no answer"));
  if (out[0] == 'E') return absl::UnavailableError(out.substr(1));
  return out.substr(1);
}

}  // namespace weft::tools::health
