#include "src/device/shared_fd.hpp"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "src/base/deadline.hpp"

namespace weft::device {
namespace {

constexpr char kPrefix[] = "weft-fds-";
constexpr size_t kTokenHex = 32;  // 128 random bits
// A take waits this long for the owner: it holds its post from before the handles travel.
constexpr absl::Duration kTakeTime = absl::Seconds(10);
// The post serves one taker at a time, each for at most this long.
constexpr absl::Duration kServeTime = absl::Seconds(2);

// What a taker sends: which descriptor, and the token that proves it got the handle.
struct Request {
  int32_t fd;
  char token[kTokenHex];
};

sockaddr_un address_of(pid_t pid, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = absl::StrCat(kPrefix, pid);
  // sun_path[0] stays 0: the abstract namespace, gone with the socket.
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

absl::Status errno_error(const char* what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Until `fd` is ready for `events`; false at the deadline.
bool ready(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, deadline.remaining_ms());
    if (n > 0) return true;
    if ((n < 0 && errno != EINTR) || deadline.expired()) return false;
  }
}

bool write_all(int fd, const void* data, size_t len, const Deadline& deadline) {
  const auto* p = static_cast<const std::byte*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n, len -= static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return false;
    } else if (!ready(fd, POLLOUT, deadline)) {
      return false;
    }
  }
  return true;
}

bool read_all(int fd, void* data, size_t len, const Deadline& deadline) {
  auto* p = static_cast<std::byte*>(data);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n, len -= static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      return false;
    } else if (!ready(fd, POLLIN, deadline)) {
      return false;
    }
  }
  return true;
}

// The process's offers and its post (one for every rank of the process).
struct Post {
  std::mutex mu;  // the offers
  std::map<int, std::string> offered;  // descriptor -> token
  // Opening and closing the post, held while its thread stops, so that a new post never
  // binds the name while the old one still holds it.
  std::mutex life_mu;
  int users = 0;
  int listener = -1;
  std::thread thread;
  std::atomic<bool> stop{false};
};
Post& post() {
  static Post* const p = new Post;  // never destroyed: no thread may outlive it at exit
  return *p;
}

// One taker: the same user, naming an offered descriptor with its token, gets it.
void serve(int conn) {
  const Deadline deadline = Deadline::after(kServeTime);
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) return;
  Request request{};
  if (!read_all(conn, &request, sizeof request, deadline)) return;
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(post().mu);
    auto it = post().offered.find(request.fd);
    if (it != post().offered.end() &&
        std::string_view(request.token, kTokenHex) == std::string_view(it->second)) {
      fd = it->first;
    }
  }
  char answer = fd >= 0 ? 'y' : 'n';
  iovec iov{&answer, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  // The answer is one byte into an empty socket: it goes at once, or the taker is gone.
  if (ready(conn, POLLOUT, deadline)) (void)sendmsg(conn, &msg, MSG_NOSIGNAL);
}

void serve_until_stopped(int listener) {
  while (!post().stop.load(std::memory_order_acquire)) {
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) continue;
    serve(conn);
    close(conn);
  }
}

struct Parsed {
  pid_t pid = 0;
  int32_t fd = -1;
  std::string_view token;
};

absl::StatusOr<Parsed> parse(std::string_view handle) {
  Parsed p;
  std::string_view rest = handle;
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(handle), "' is not a shared memory handle (weft-fds-PID:FD:TOKEN)"));
  };
  const std::string_view prefix(kPrefix);
  if (rest.substr(0, prefix.size()) != prefix) return bad();
  rest.remove_prefix(prefix.size());
  const size_t a = rest.find(':'), b = rest.find(':', a == rest.npos ? a : a + 1);
  if (a == rest.npos || b == rest.npos ||
      std::from_chars(rest.data(), rest.data() + a, p.pid).ec != std::errc() ||
      std::from_chars(rest.data() + a + 1, rest.data() + b, p.fd).ec != std::errc() ||
      p.pid <= 0 || p.fd < 0 || rest.size() - b - 1 != kTokenHex) {
    return bad();
  }
  p.token = rest.substr(b + 1);
  return p;
}

}  // namespace

std::string fd_handle(int fd) {
  unsigned char bytes[kTokenHex / 2];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string token = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
  std::string handle = absl::StrCat(kPrefix, getpid(), ":", fd, ":", token);
  std::lock_guard<std::mutex> lock(post().mu);
  post().offered[fd] = std::move(token);
  return handle;
}

void forget_fd(int fd) {
  std::lock_guard<std::mutex> lock(post().mu);
  post().offered.erase(fd);
}

absl::StatusOr<int> take_fd(std::string_view handle) {
  auto parsed = parse(handle);
  if (!parsed.ok()) return parsed.status();
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return errno_error("socket for taking a shared descriptor");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{s};
  const Deadline deadline = Deadline::after(kTakeTime);
  socklen_t len = 0;
  const sockaddr_un owner = address_of(parsed->pid, &len);
  // The owner's post is up before its handle travels (no socket: the owner is gone, or in
  // another network namespace); a full backlog clears as it serves.
  while (connect(s, reinterpret_cast<const sockaddr*>(&owner), len) != 0) {
    if ((errno != EAGAIN && errno != EINTR) || deadline.expired()) {
      return absl::UnavailableError(absl::StrCat(
          "reaching process ", parsed->pid, " for its shared memory: ", std::strerror(errno),
          " (ranks of one host must share a network namespace for its abstract Unix sockets; "
          "otherwise set WEFT_CUDA_IPC=off)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ucred cred{};
  socklen_t cred_len = sizeof cred;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 || cred.pid != parsed->pid ||
      cred.uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the socket of process ", parsed->pid, " is held by process ", cred.pid, " of user ",
        cred.uid, ": no descriptor is taken from it (ranks of one host must run as one user)"));
  }
  Request request{};
  request.fd = parsed->fd;
  std::memcpy(request.token, parsed->token.data(), kTokenHex);
  char answer = 0;
  iovec iov{&answer, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = -1;
  if (write_all(s, &request, sizeof request, deadline)) {
    while ((n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC)) < 0 && (errno == EAGAIN || errno == EINTR) &&
           ready(s, POLLIN, deadline)) {
    }
  }
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n > 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  }
  if (n == 1 && answer == 'y' && fd >= 0) return fd;
  if (fd >= 0) close(fd);
  if (n == 1 && answer == 'n') {
    return absl::PermissionDeniedError(absl::StrCat(
        "process ", parsed->pid, " offers no descriptor ", parsed->fd, " under that token (a "
        "handle from an earlier communicator?)"));
  }
  return absl::UnavailableError(absl::StrCat(
      "process ", parsed->pid, " did not hand over descriptor ", parsed->fd, " within ",
      absl::FormatDuration(kTakeTime), " (has it ended?)"));
}

FdPost::FdPost() {
  std::lock_guard<std::mutex> lock(post().life_mu);
  if (post().users++ > 0) return;
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t len = 0;
  const sockaddr_un me = address_of(getpid(), &len);
  if (s < 0 || bind(s, reinterpret_cast<const sockaddr*>(&me), len) != 0 || listen(s, 64) != 0) {
    // Takers then find nothing and say so; the ranks agree to stage instead.
    if (s >= 0) close(s);
    return;
  }
  post().listener = s;
  post().stop.store(false, std::memory_order_release);
  post().thread = std::thread(serve_until_stopped, s);
}

FdPost::~FdPost() {
  std::lock_guard<std::mutex> lock(post().life_mu);
  if (--post().users > 0 || post().listener < 0) return;
  post().stop.store(true, std::memory_order_release);
  post().thread.join();
  close(post().listener);
  post().listener = -1;
}

}  // namespace weft::device
