#include "src/device/shared_fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "src/base/deadline.hpp"
#include "src/base/job_secret.hpp"

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
  std::mutex mu;                       // the offers and the name
  std::map<int, std::string> offered;  // descriptor -> token
  std::string name;  // the socket's: "weft-fds-PID-NONCE", made by each post
  // Opening and closing the post, held while its thread stops, so that a new post never
  // binds the name while the old one still holds it.
  std::mutex life_mu;
  int users = 0;
  int listener = -1;
  pthread_t thread{};
  std::atomic<bool> stop{false};
};

void before_fork();
void after_fork_parent();
void after_fork_child();

Post& post() {
  static Post* const p = [] {
    // A child forked while a post is up must not keep serving, nor hold the name.
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    return new Post;  // never destroyed: no thread may outlive it at exit
  }();
  return *p;
}

void before_fork() {
  post().life_mu.lock();
  post().mu.lock();
}
void after_fork_parent() {
  post().mu.unlock();
  post().life_mu.unlock();
}
void after_fork_child() {
  Post& p = post();
  if (p.listener >= 0) close(p.listener);
  p.listener = -1;
  p.users = 0;
  p.offered.clear();
  p.name.clear();  // another process: another pid, another nonce
  p.mu.unlock();
  p.life_mu.unlock();
}

// 128 random bits in hex (the kernel's, as the job's own nonces).
std::string random_hex() {
  const Nonce bytes = fresh_nonce();
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}
static_assert(sizeof(Nonce) * 2 == kTokenHex);

// The post's socket name, made by each post (or at first use without one). Its nonce,
// published only in handles, keeps anyone from taking the name first, and keeps apart
// processes of equal pid in other PID namespaces that share this network namespace. Called
// with mu held.
const std::string& name_locked() {
  if (post().name.empty()) post().name = absl::StrCat(kPrefix, getpid(), "-", random_hex());
  return post().name;
}

sockaddr_un address_of(std::string_view name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // sun_path[0] stays 0: the abstract namespace, gone with the socket.
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// One taker: the same user, naming an offered descriptor with its token, gets a copy of it
// (made under the lock: the owner may close its own once this returns).
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
      fd = fcntl(it->first, F_DUPFD_CLOEXEC, 0);
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
  if (fd >= 0) close(fd);
}

void* serve_until_stopped(void* arg) {
  const int listener = *static_cast<const int*>(arg);
  while (!post().stop.load(std::memory_order_acquire)) {
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors?
      continue;
    }
    serve(conn);
    close(conn);
  }
  return nullptr;
}

bool all_of(std::string_view text, bool (*allowed)(char)) {
  for (char c : text) {
    if (!allowed(c)) return false;
  }
  return !text.empty();
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

struct Parsed {
  std::string_view name;  // the owner's socket: "weft-fds-PID-NONCE"
  std::string_view pid;   // for messages
  int32_t fd = -1;
  std::string_view token;
};

// "weft-fds-PID-NONCE:FD:TOKEN", every field whole.
absl::StatusOr<Parsed> parse(std::string_view handle) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(handle), "' is not a shared memory handle (weft-fds-PID-NONCE:FD:TOKEN)"));
  };
  const std::string_view prefix(kPrefix);
  const size_t a = handle.find(':'), b = handle.find(':', a == handle.npos ? a : a + 1);
  if (handle.substr(0, prefix.size()) != prefix || a == handle.npos || b == handle.npos) return bad();
  Parsed p;
  p.name = handle.substr(0, a);
  const std::string_view id = p.name.substr(prefix.size());
  const size_t dash = id.find('-');
  if (dash == id.npos) return bad();
  p.pid = id.substr(0, dash);
  const std::string_view nonce = id.substr(dash + 1), fd = handle.substr(a + 1, b - a - 1);
  p.token = handle.substr(b + 1);
  if (!all_of(p.pid, is_digit) || nonce.size() != kTokenHex || !all_of(nonce, is_hex) ||
      !all_of(fd, is_digit) || p.token.size() != kTokenHex || !all_of(p.token, is_hex) ||
      std::from_chars(fd.data(), fd.data() + fd.size(), p.fd).ec != std::errc()) {
    return bad();
  }
  return p;
}

}  // namespace

std::string fd_handle(int fd) {
  std::string token = random_hex();
  std::lock_guard<std::mutex> lock(post().mu);
  std::string handle = absl::StrCat(name_locked(), ":", fd, ":", token);
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
  const std::string pid(parsed->pid);
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return errno_error("socket for taking a shared descriptor");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{s};
  const Deadline deadline = Deadline::after(kTakeTime);
  socklen_t len = 0;
  const sockaddr_un owner = address_of(parsed->name, &len);
  // The owner's post is up before its handle travels (no socket: the owner is gone, or in
  // another network namespace); a full backlog clears as it serves.
  while (connect(s, reinterpret_cast<const sockaddr*>(&owner), len) != 0) {
    if ((errno != EAGAIN && errno != EINTR) || deadline.expired()) {
      return absl::UnavailableError(absl::StrCat(
          "reaching process ", pid, " for its shared memory: ", std::strerror(errno),
          " (ranks of one host must share a network namespace for its abstract Unix sockets; "
          "otherwise set WEFT_CUDA_IPC=off)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ucred cred{};
  socklen_t cred_len = sizeof cred;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 || cred.uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the socket of process ", pid, " belongs to user ", cred.uid, ", not this one: no "
        "descriptor is taken from it (ranks of one host must run as one user)"));
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
        "process ", pid, " offers no descriptor ", parsed->fd, " under that token (a "
        "handle from an earlier communicator?)"));
  }
  return absl::UnavailableError(absl::StrCat(
      "process ", pid, " did not hand over descriptor ", parsed->fd, " within ",
      absl::FormatDuration(kTakeTime), " (has it ended?)"));
}

FdPost::FdPost() {
  std::lock_guard<std::mutex> lock(post().life_mu);
  if (post().users++ > 0) return;
  std::string name;
  {
    // A name of its own for each post: a child forked under the last one may still hold
    // that one's name until it runs, and it would take the connections.
    std::lock_guard<std::mutex> offers(post().mu);
    post().name.clear();
    name = name_locked();
  }
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  socklen_t len = 0;
  const sockaddr_un me = address_of(name, &len);
  if (s < 0 || bind(s, reinterpret_cast<const sockaddr*>(&me), len) != 0 || listen(s, 64) != 0) {
    // Takers then find nothing and say so; the ranks agree to stage instead.
    std::fprintf(stderr, "weft: cannot serve the cuda_ipc windows' descriptors: %s\n",
                 std::strerror(errno));
    if (s >= 0) close(s);
    return;
  }
  post().listener = s;
  post().stop.store(false, std::memory_order_release);
  if (pthread_create(&post().thread, nullptr, serve_until_stopped, &post().listener) != 0) {
    std::fprintf(stderr, "weft: cannot start the thread that serves the cuda_ipc windows' "
                         "descriptors\n");
    close(s);
    post().listener = -1;
  }
}

FdPost::~FdPost() {
  std::lock_guard<std::mutex> lock(post().life_mu);
  if (--post().users > 0 || post().listener < 0) return;
  post().stop.store(true, std::memory_order_release);
  pthread_join(post().thread, nullptr);
  close(post().listener);
  post().listener = -1;
}

}  // namespace weft::device
