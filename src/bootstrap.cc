#include "src/bootstrap.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "src/env.hpp"
#include "src/launch_env.hpp"
#include "transport/tcp/address.hpp"

namespace weft {
namespace {

// ---------------------------------------------------------------------------------------------
// Wire format (see bootstrap.hpp) and socket helpers shared by server and client.

constexpr char kMagic[4] = {'W', 'E', 'F', 'T'};
constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kHelloHeaderBytes = 28;  // magic, version, pad, job, rank, size, blob_len
constexpr size_t kReplyHeaderBytes = 8;   // magic, code
constexpr uint32_t kMaxMessageBytes = 4096;
constexpr int kMaxPendingHellos = 1024;
constexpr int kMaxLogLines = 32;

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void put_u16(std::string& out, uint16_t v) { out.append(reinterpret_cast<const char*>(&v), 2); }
void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
template <typename T>
T get_at(std::string_view in, size_t at) {
  T v{};
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

struct Hello {
  bool magic_ok = false;
  uint16_t version = 0;
  uint64_t job_id = 0;
  uint32_t rank = 0, size = 0, blob_len = 0;
};

std::string encode_hello(uint64_t job_id, int rank, int size, const std::string& blob) {
  std::string out(kMagic, 4);
  put_u16(out, kProtocolVersion);
  put_u16(out, 0);
  put_u64(out, job_id);
  put_u32(out, static_cast<uint32_t>(rank));
  put_u32(out, static_cast<uint32_t>(size));
  put_u32(out, static_cast<uint32_t>(blob.size()));
  return out + blob;
}

Hello parse_hello_header(std::string_view in) {
  Hello h;
  h.magic_ok = std::memcmp(in.data(), kMagic, 4) == 0;
  h.version = get_at<uint16_t>(in, 4);
  h.job_id = get_at<uint64_t>(in, 8);
  h.rank = get_at<uint32_t>(in, 16);
  h.size = get_at<uint32_t>(in, 20);
  h.blob_len = get_at<uint32_t>(in, 24);
  return h;
}

std::string encode_error_reply(absl::StatusCode code, std::string_view why) {
  std::string out(kMagic, 4);
  put_u32(out, static_cast<uint32_t>(code));
  why = why.substr(0, kMaxMessageBytes);
  put_u32(out, static_cast<uint32_t>(why.size()));
  out.append(why);
  return out;
}

std::string encode_table_reply(const std::vector<std::string>& blobs) {
  std::string out(kMagic, 4);
  put_u32(out, 0);
  put_u32(out, static_cast<uint32_t>(blobs.size()));
  for (const auto& b : blobs) {
    put_u32(out, static_cast<uint32_t>(b.size()));
    out.append(b);
  }
  return out;
}

std::string hex_prefix(std::string_view in, size_t n) {
  std::string out;
  for (size_t i = 0; i < std::min(n, in.size()); ++i) {
    absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(in[i]));
  }
  return out;
}

// A non-blocking listening socket on `address`, and the address it got (port 0 → real port).
absl::StatusOr<std::pair<UniqueFd, RendezvousAddress>> listen_on(const RendezvousAddress& address) {
  sockaddr_storage ss;
  const socklen_t len = address.to_sockaddr(ss);
  UniqueFd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::InternalError(absl::StrCat("socket failed: ", std::strerror(errno)));
  }
  // A coordinator port is reused job after job; TIME_WAIT remnants must not block it.
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      listen(fd.get(), SOMAXCONN) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address.to_string(), " for the rendezvous: ", std::strerror(errno),
        errno == EADDRINUSE ? "; another process (an earlier job?) holds that port, pick another"
                            : ""));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len);
  auto actual = RendezvousAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&bound), bound_len);
  if (!actual.ok()) return actual.status();
  return std::make_pair(std::move(fd), *actual);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Server: one thread, non-blocking sockets, one poll() bounded by the deadline.

class RendezvousServer::Impl {
 public:
  Impl(UniqueFd listen, UniqueFd wake, RendezvousAddress address, uint64_t job_id, int size,
       Deadline deadline)
      : address_(address), job_id_(job_id), deadline_(deadline), listen_(std::move(listen)),
        wake_(std::move(wake)) {
    if (size > 0) set_size(size, "when the rendezvous started");
  }

  void run() {
    result_ = serve();
    conns_.clear();
    listen_.reset();
    done_.store(true, std::memory_order_release);
  }

  const RendezvousAddress address_;
  const uint64_t job_id_;
  const Deadline deadline_;
  UniqueFd listen_, wake_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  absl::Mutex join_mu_;
  bool joined_ ABSL_GUARDED_BY(join_mu_) = false;
  absl::Status result_;  // written by the thread before done_; read after join

 private:
  struct Conn {
    UniqueFd fd;
    std::string peer;
    enum class State { kHello, kWaiting, kReplying } state = State::kHello;
    std::string in;              // the hello so far; never longer than `need`
    size_t need = kHelloHeaderBytes;
    int rank = -1;               // set once registered
    std::shared_ptr<const std::string> out;
    size_t sent = 0;
    bool carries_table = false;  // a registered rank's table, not an error reply
  };

  absl::Status serve();
  void accept_all();
  void read_hello(Conn& c);
  void handle_hello(Conn& c);
  void refuse(Conn& c, absl::StatusCode code, const std::string& why);
  void complete();
  void flush(Conn& c);
  absl::Status time_out();

  void set_size(int size, std::string source) {
    size_ = size;
    size_source_ = std::move(source);
    by_rank_.assign(size, nullptr);
    blobs_.assign(size, std::string());
  }
  void log(const std::string& what) {
    // Bounded: a port scanner must not flood the job's stderr.
    if (++logged_ <= kMaxLogLines) {
      std::fprintf(stderr, "weft: rendezvous %s: %s%s\n", address_.to_string().c_str(),
                   what.c_str(), logged_ == kMaxLogLines ? " (further messages suppressed)" : "");
    }
  }
  void drop(Conn& c, const std::string& why) {
    log(absl::StrCat("ignored a connection from ", c.peer, ": ", why));
    c.fd.reset();
  }

  std::vector<std::unique_ptr<Conn>> conns_;
  int size_ = 0;  // 0 until known
  std::string size_source_;
  std::vector<Conn*> by_rank_;
  std::vector<std::string> blobs_;
  int arrived_ = 0;
  bool complete_ = false;
  int delivered_ = 0;
  std::vector<int> undelivered_;
  int logged_ = 0;
  absl::Time listen_paused_until_ = absl::InfinitePast();
};

absl::Status RendezvousServer::Impl::serve() {
  std::vector<pollfd> fds;
  std::vector<Conn*> who;
  while (true) {
    if (complete_ && delivered_ + static_cast<int>(undelivered_.size()) == size_) {
      if (undelivered_.empty()) return absl::OkStatus();
      return absl::UnavailableError(absl::StrCat(
          "rendezvous at ", address_.to_string(), " could not send the table to ",
          undelivered_.size(), " rank(s), first rank ", undelivered_.front(),
          "; those ranks exited or lost their connection"));
    }
    if (deadline_.expired()) return time_out();
    fds.clear();
    who.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    who.push_back(nullptr);
    const bool listening = listen_.get() >= 0 && absl::Now() >= listen_paused_until_;
    if (listening) {
      fds.push_back({listen_.get(), POLLIN, 0});
      who.push_back(nullptr);
    }
    for (auto& c : conns_) {
      fds.push_back({c->fd.get(),
                     static_cast<short>(c->state == Conn::State::kReplying ? POLLOUT : POLLIN), 0});
      who.push_back(c.get());
    }
    // Wake at least every 50 ms while accepting is paused (out of file descriptors).
    int timeout = deadline_.remaining_ms();
    if (listen_.get() >= 0 && !listening) timeout = std::min(timeout, 50);
    const int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("rendezvous poll failed: ", std::strerror(errno)));
    }
    if (n <= 0) continue;
    if (fds[0].revents != 0) {
      return absl::CancelledError(
          absl::StrCat("rendezvous at ", address_.to_string(), " was stopped"));
    }
    if (listening && fds[1].revents != 0) accept_all();
    for (size_t i = 0; i < fds.size(); ++i) {
      Conn* c = who[i];
      if (c == nullptr || fds[i].revents == 0 || !c->fd.valid()) continue;
      switch (c->state) {
        case Conn::State::kHello:
          read_hello(*c);
          break;
        case Conn::State::kWaiting: {
          // A registered rank has nothing more to say: data or EOF means it gave up.
          log(absl::StrCat("rank ", c->rank, " (", c->peer,
                           ") left before every rank had arrived; it may reconnect"));
          by_rank_[c->rank] = nullptr;
          blobs_[c->rank].clear();
          --arrived_;
          c->fd.reset();
          break;
        }
        case Conn::State::kReplying:
          flush(*c);
          break;
      }
    }
    std::erase_if(conns_, [](const auto& c) { return !c->fd.valid(); });
  }
}

void RendezvousServer::Impl::accept_all() {
  while (true) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = accept4(listen_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        log(absl::StrCat("cannot accept more connections (", std::strerror(errno),
                         "); raise `ulimit -n`"));
        listen_paused_until_ = absl::Now() + absl::Milliseconds(50);
      }
      return;  // EAGAIN, or a connection that died in the backlog
    }
    auto c = std::make_unique<Conn>();
    c->fd = UniqueFd(fd);
    auto a = RendezvousAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&ss), len);
    c->peer = a.ok() ? a->to_string() : "an unknown address";
    // Bound the connections that have not said who they are: drop the oldest one, which is
    // far likelier to be an idle stranger than a rank (ranks send their hello at once).
    int pending = 0;
    for (const auto& o : conns_) pending += o->state == Conn::State::kHello && o->fd.valid();
    if (pending >= kMaxPendingHellos) {
      for (auto& o : conns_) {
        if (o->state == Conn::State::kHello && o->fd.valid()) {
          drop(*o, "too many connections without a hello");
          break;
        }
      }
    }
    conns_.push_back(std::move(c));
  }
}

void RendezvousServer::Impl::read_hello(Conn& c) {
  while (c.in.size() < c.need) {
    char buf[16384];
    const size_t want = std::min(sizeof(buf), c.need - c.in.size());
    const ssize_t n = recv(c.fd.get(), buf, want, 0);
    if (n == 0) return drop(c, "closed before sending a complete hello");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return drop(c, absl::StrCat("read failed: ", std::strerror(errno)));
    }
    c.in.append(buf, static_cast<size_t>(n));
    if (c.need == kHelloHeaderBytes && c.in.size() == kHelloHeaderBytes) {
      // The header alone decides whether this is a weft rank and how much more to read.
      Hello h = parse_hello_header(c.in);
      if (!h.magic_ok) {
        return drop(c, absl::StrFormat("not a weft hello (first bytes %s)",
                                       hex_prefix(c.in, 8)));
      }
      if (h.blob_len > kMaxPeerBlobBytes) {
        return drop(c, absl::StrCat("announced a ", h.blob_len, "-byte peer info (limit ",
                                    kMaxPeerBlobBytes, ")"));
      }
      c.need = kHelloHeaderBytes + h.blob_len;
    }
  }
  handle_hello(c);
}

void RendezvousServer::Impl::handle_hello(Conn& c) {
  const Hello h = parse_hello_header(c.in);
  const std::string blob = c.in.substr(kHelloHeaderBytes);
  c.in = std::string();
  const std::string who = absl::StrCat("rank ", h.rank, " (", c.peer, ")");
  if (h.version != kProtocolVersion) {
    return refuse(c, absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(who, " speaks bootstrap protocol ", h.version, " but the "
                               "rendezvous speaks ", kProtocolVersion,
                               "; run the same weft version on every rank"));
  }
  if (h.job_id != job_id_) {
    return refuse(c, absl::StatusCode::kFailedPrecondition,
                  absl::StrFormat("%s brought job id %016x but the rendezvous at %s serves job "
                                  "%016x; that rank has a unique id (or WEFT_COORDINATOR) from "
                                  "another job", who, h.job_id, address_.to_string(), job_id_));
  }
  if (complete_) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " arrived after all ", size_, " ranks had; every process "
                               "needs its own rank (check WEFT_RANK or the launcher)"));
  }
  if (h.size < 1 || h.size > static_cast<uint32_t>(kMaxLaunchSize)) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " says the job has ", h.size, " ranks; sizes run from 1 to ",
                               kMaxLaunchSize));
  }
  // Without a size of its own, the server takes the first valid hello's (ncclGetUniqueId
  // does not know the size either); a refused hello teaches it nothing.
  const uint32_t size = size_ != 0 ? static_cast<uint32_t>(size_) : h.size;
  if (h.size != size) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " says the job has ", h.size, " ranks but the rendezvous at ",
                               address_.to_string(), " serves ", size_, " ranks (set ",
                               size_source_, "); every rank must pass the same size"));
  }
  if (h.rank >= size) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " is not below the job size ", size));
  }
  if (size_ != 0 && by_rank_[h.rank] != nullptr) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, ": rank ", h.rank, " already joined from ",
                               by_rank_[h.rank]->peer, "; every process needs its own rank ",
                               "(check WEFT_RANK or the launcher)"));
  }
  auto info = PeerInfo::decode(blob);
  if (!info.ok() || info->rank != static_cast<int>(h.rank)) {
    return refuse(c, absl::StatusCode::kInvalidArgument,
                  absl::StrCat(who, " sent a peer info that ",
                               info.ok() ? absl::StrCat("claims rank ", info->rank)
                                         : std::string(info.status().message())));
  }
  if (size_ == 0) set_size(static_cast<int>(size), absl::StrCat("by the hello of rank ", h.rank));
  c.rank = static_cast<int>(h.rank);
  c.state = Conn::State::kWaiting;
  by_rank_[c.rank] = &c;
  blobs_[c.rank] = blob;
  if (++arrived_ == size_) complete();
}

void RendezvousServer::Impl::refuse(Conn& c, absl::StatusCode code, const std::string& why) {
  log(absl::StrCat("refused ", why));
  c.out = std::make_shared<const std::string>(encode_error_reply(code, why));
  c.state = Conn::State::kReplying;
  flush(c);
}

void RendezvousServer::Impl::complete() {
  complete_ = true;
  listen_.reset();  // nobody else belongs here; late duplicates see "connection refused"
  auto table = std::make_shared<const std::string>(encode_table_reply(blobs_));
  blobs_.clear();
  for (Conn* c : by_rank_) {
    c->out = table;
    c->carries_table = true;
    c->state = Conn::State::kReplying;
    flush(*c);
  }
}

void RendezvousServer::Impl::flush(Conn& c) {
  while (c.sent < c.out->size()) {
    const ssize_t n =
        send(c.fd.get(), c.out->data() + c.sent, c.out->size() - c.sent, MSG_NOSIGNAL);
    if (n > 0) {
      c.sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (c.carries_table) {
      log(absl::StrCat("could not send the table to rank ", c.rank, " (", c.peer, "): ",
                       std::strerror(errno)));
      undelivered_.push_back(c.rank);
    }
    c.fd.reset();
    return;
  }
  // All bytes are queued; close() still delivers them (the peer sent nothing unread).
  if (c.carries_table) ++delivered_;
  c.fd.reset();
}

absl::Status RendezvousServer::Impl::time_out() {
  if (complete_) {
    const std::string detail = absl::StrCat("timed out sending the table: ", delivered_, " of ",
                                            size_, " ranks got it; the others stopped reading");
    log(detail);
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous at ", address_.to_string(), " ", detail));
  }
  std::string missing;
  int listed = 0;
  for (int r = 0; r < size_; ++r) {
    if (by_rank_[r] != nullptr) continue;
    if (++listed <= 8) absl::StrAppend(&missing, listed > 1 ? ", " : "", r);
  }
  if (listed > 8) absl::StrAppend(&missing, ", ...");
  const std::string detail =
      size_ == 0 ? std::string("timed out before any rank arrived")
                 : absl::StrCat("timed out with ", arrived_, " of ", size_,
                                " ranks; missing rank(s) ", missing,
                                ": did they start, with the same unique id / WEFT_COORDINATOR? "
                                "(raise WEFT_TIMEOUT if they are just slow)");
  log(detail);
  const std::string msg = absl::StrCat("rendezvous at ", address_.to_string(), " ", detail);
  // Tell the ranks that did come, best effort: the reply is small enough for the socket buffer.
  for (Conn* c : by_rank_) {
    if (c == nullptr || c->state != Conn::State::kWaiting) continue;
    c->out = std::make_shared<const std::string>(
        encode_error_reply(absl::StatusCode::kDeadlineExceeded, msg));
    c->state = Conn::State::kReplying;
    flush(*c);
  }
  return absl::DeadlineExceededError(msg);
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::start(
    const RendezvousAddress& bind_address, uint64_t job_id, int size, Deadline deadline) {
  if (size < 0 || size > kMaxLaunchSize) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous size ", size, " is outside 0-",
                                                   kMaxLaunchSize));
  }
  auto listen = listen_on(bind_address);
  if (!listen.ok()) return listen.status();
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) {
    return absl::InternalError(absl::StrCat("eventfd failed: ", std::strerror(errno)));
  }
  auto impl = std::make_unique<Impl>(std::move(listen->first), std::move(wake), listen->second,
                                     job_id, size, deadline);
  Impl* raw = impl.get();
  raw->thread_ = std::thread([raw] { raw->run(); });
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::start(
    const RendezvousAddress& bind_address, uint64_t job_id, int size) {
  auto config = Config::from_env();
  if (!config.ok()) return config.status();
  return start(bind_address, job_id, size, Deadline::after(config->timeout));
}

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RendezvousServer::~RendezvousServer() {
  stop();
  wait().IgnoreError();
}

const RendezvousAddress& RendezvousServer::address() const { return impl_->address_; }

bool RendezvousServer::done() const { return impl_->done_.load(std::memory_order_acquire); }

absl::Status RendezvousServer::wait() {
  absl::MutexLock lock(&impl_->join_mu_);
  if (!impl_->joined_) {
    impl_->thread_.join();
    impl_->joined_ = true;
  }
  return impl_->result_;
}

void RendezvousServer::stop() {
  const uint64_t one = 1;
  // Fails only when the counter would overflow, i.e. stop() was already called.
  [[maybe_unused]] ssize_t n = write(impl_->wake_.get(), &one, sizeof(one));
}

// ---------------------------------------------------------------------------------------------
// Client: one blocking-style exchange built from non-blocking calls and poll(), so that every
// wait honours the deadline.

namespace {

bool is_self_connection(int fd) {
  // Connecting in a loop to a free local port can make TCP connect the socket to itself
  // (simultaneous open); that is "nobody listens yet", not a rendezvous.
  sockaddr_storage a{}, b{};
  socklen_t la = sizeof(a), lb = sizeof(b);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &la) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&b), &lb) != 0) {
    return false;
  }
  return la == lb && std::memcmp(&a, &b, la) == 0;
}

struct Client {
  Deadline deadline;
  std::string where;  // the rendezvous address
  std::string who;    // "rank 3 of 8"
  UniqueFd fd;

  // "timed out waiting for rank 3 of 8 to <doing> ...".
  absl::Status timed_out(std::string_view doing) const {
    return deadline_error(absl::StrCat(who, " to ", std::string(doing)));
  }

  absl::Status connect(const RendezvousAddress& to) {
    absl::Duration nap = absl::Milliseconds(2);
    int last = 0;
    while (!deadline.expired()) {
      sockaddr_storage ss;
      const socklen_t len = to.to_sockaddr(ss);
      fd = UniqueFd(socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd.valid()) {
        return absl::InternalError(absl::StrCat("socket failed: ", std::strerror(errno)));
      }
      int err = 0;
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          pollfd p{fd.get(), POLLOUT, 0};
          const int n = poll(&p, 1, deadline.remaining_ms());
          if (n == 0) break;
          socklen_t l = sizeof(err);
          if (n < 0) err = errno;
          else getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &l);
        }
      }
      if (err == 0 && !is_self_connection(fd.get())) return absl::OkStatus();
      if (err == 0) err = ECONNREFUSED;
      // Refused: the server is not up yet. Anything else (no route, bad address) will not
      // heal by itself, so it fails now.
      if (err != ECONNREFUSED && err != ETIMEDOUT && err != EINTR && err != EAGAIN) {
        return absl::UnavailableError(absl::StrCat(
            who, " cannot connect to the rendezvous at ", where, ": ", std::strerror(err),
            "; check the address (WEFT_COORDINATOR, WEFT_SOCKET_IFNAME) and firewalls"));
      }
      last = err;
      fd.reset();
      absl::SleepFor(std::min(nap, std::max(deadline.remaining(), absl::ZeroDuration())));
      nap = std::min(nap * 2, absl::Milliseconds(100));
    }
    return timed_out(absl::StrCat("connect to the rendezvous at ", where, " (last attempt: ",
                                  last ? std::strerror(last) : "none",
                                  "; is the process that serves it, rank 0 or the caller of "
                                  "make_unique_id, running?)"));
  }

  absl::Status wait_for(short events, std::string_view doing) {
    pollfd p{fd.get(), events, 0};
    const int n = poll(&p, 1, deadline.remaining_ms());
    if (n == 0) return timed_out(doing);
    if (n < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  absl::Status write_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (auto st = wait_for(POLLOUT, absl::StrCat("send its hello to ", where)); !st.ok()) {
          return st;
        }
      } else {
        return absl::UnavailableError(absl::StrCat(who, " lost the rendezvous at ", where,
                                                   " while sending its hello: ",
                                                   std::strerror(errno)));
      }
    }
    return absl::OkStatus();
  }

  absl::Status read_exact(char* out, size_t len) {
    while (len > 0) {
      const ssize_t n = recv(fd.get(), out, len, 0);
      if (n > 0) {
        out += n;
        len -= static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (auto st = wait_for(POLLIN, absl::StrCat("receive the table from the rendezvous at ",
                                                    where, " (not every rank has arrived)"));
            !st.ok()) {
          return st;
        }
      } else {
        return absl::UnavailableError(absl::StrCat(
            who, ": the rendezvous at ", where, " closed the connection before sending the table",
            n < 0 ? absl::StrCat(" (", std::strerror(errno), ")") : std::string(),
            "; its process may have stopped or timed out"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint32_t> read_u32() {
    uint32_t v = 0;
    if (auto st = read_exact(reinterpret_cast<char*>(&v), 4); !st.ok()) return st;
    return v;
  }
};

}  // namespace

absl::StatusOr<std::vector<PeerInfo>> bootstrap_exchange(const UniqueId& id, int rank, int size,
                                                         const PeerInfo& self, Deadline deadline) {
  auto decoded = decode_unique_id(id);
  if (!decoded.ok()) return decoded.status();
  if (size < 1 || size > kMaxLaunchSize || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap: rank ", rank, " of size ", size, " is impossible; ranks run from 0 to size-1",
        " and size from 1 to ", kMaxLaunchSize));
  }
  if (self.rank != -1 && self.rank != rank) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap: the peer info of rank ", rank,
                                                   " says rank ", self.rank));
  }
  PeerInfo me = self;
  me.rank = rank;
  const std::string blob = me.encode();
  if (blob.size() > kMaxPeerBlobBytes) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap: rank ", rank, "'s peer info is ",
                                                   blob.size(), " bytes, over the limit of ",
                                                   kMaxPeerBlobBytes));
  }
  Client c{deadline, decoded->address.to_string(), absl::StrCat("rank ", rank, " of ", size), {}};
  if (auto st = c.connect(decoded->address); !st.ok()) return st;
  if (auto st = c.write_all(encode_hello(decoded->job_id, rank, size, blob)); !st.ok()) return st;

  char header[kReplyHeaderBytes];
  if (auto st = c.read_exact(header, sizeof(header)); !st.ok()) return st;
  if (std::memcmp(header, kMagic, 4) != 0) {
    return absl::UnavailableError(absl::StrCat(
        c.who, ": ", c.where, " is not a weft rendezvous (it answered ",
        hex_prefix(std::string_view(header, sizeof(header)), 8),
        "); check the unique id or WEFT_COORDINATOR's port"));
  }
  const uint32_t code = get_at<uint32_t>(std::string_view(header, sizeof(header)), 4);
  if (code != 0) {
    auto len = c.read_u32();
    if (!len.ok()) return len.status();
    std::string why(std::min(*len, kMaxMessageBytes), '\0');
    if (auto st = c.read_exact(why.data(), why.size()); !st.ok()) return st;
    const auto status_code = code <= 16 ? static_cast<absl::StatusCode>(code)
                                        : absl::StatusCode::kUnknown;
    return absl::Status(status_code, absl::StrCat(c.who, ": ", why));
  }
  auto count = c.read_u32();
  if (!count.ok()) return count.status();
  if (*count != static_cast<uint32_t>(size)) {
    return absl::UnavailableError(absl::StrCat(c.who, ": the rendezvous at ", c.where,
                                               " sent a table of ", *count, " ranks"));
  }
  std::vector<PeerInfo> table;
  table.reserve(size);
  for (int r = 0; r < size; ++r) {
    auto len = c.read_u32();
    if (!len.ok()) return len.status();
    if (*len > kMaxPeerBlobBytes) {
      return absl::UnavailableError(absl::StrCat(c.who, ": the rendezvous sent a ", *len,
                                                 "-byte peer info for rank ", r));
    }
    std::string b(*len, '\0');
    if (auto st = c.read_exact(b.data(), b.size()); !st.ok()) return st;
    auto info = PeerInfo::decode(b);
    if (!info.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(c.who, ": peer info of rank ", r, ": ",
                                                     info.status().message()));
    }
    if (info->rank != r) {
      return absl::UnavailableError(absl::StrCat(c.who, ": the rendezvous table has rank ",
                                                 info->rank, " in slot ", r));
    }
    table.push_back(std::move(*info));
  }
  return table;
}

absl::StatusOr<std::vector<PeerInfo>> bootstrap_from_coordinator(const std::string& host_port,
                                                                 int rank, int size,
                                                                 const PeerInfo& self,
                                                                 Deadline deadline) {
  auto id = unique_id_for_coordinator(host_port);
  if (!id.ok()) return id.status();
  std::unique_ptr<RendezvousServer> server;
  if (rank == 0) {
    auto decoded = decode_unique_id(*id);
    if (!decoded.ok()) return decoded.status();
    RendezvousAddress bind_address = decoded->address;
    if (!bind_address.is_loopback()) {
      // Listen on every interface: the name may resolve to another local address here
      // (Debian maps the host name to 127.0.1.1) than on the other hosts.
      auto probe = RendezvousAddress(bind_address);
      probe.port = 0;
      if (!listen_on(probe).ok()) {
        std::fprintf(stderr, "weft: WEFT_COORDINATOR=%s resolves to %s, which is not an address "
                     "of rank 0's host; the other ranks will not find rank 0 there\n",
                     host_port.c_str(), decoded->address.to_string().c_str());
      }
      bind_address.address = {};
    }
    auto started = RendezvousServer::start(bind_address, decoded->job_id, size, deadline);
    if (!started.ok()) {
      return absl::Status(started.status().code(),
                          absl::StrCat("rank 0 cannot serve WEFT_COORDINATOR=", host_port, ": ",
                                       started.status().message()));
    }
    server = std::move(*started);
  }
  auto table = bootstrap_exchange(*id, rank, size, self, deadline);
  // Rank 0 keeps serving until every rank has its table (bounded by the deadline); the
  // server logs any rank it could not serve, and this rank's own result stands.
  if (server != nullptr && table.ok()) server->wait().IgnoreError();
  return table;
}

// ---------------------------------------------------------------------------------------------
// make_unique_id: the caller's process serves the rendezvous until it completes or times out.

namespace {

// Servers started by make_unique_id, reaped as they finish. At exit the destructor stops
// and joins those still running (each stops within one poll wake-up). A forked child must not:
// the threads are not its own and the wake-up eventfd is shared with the parent, so it
// leaves them alone.
struct Registry {
  const pid_t pid = getpid();
  absl::Mutex mu;
  std::vector<std::unique_ptr<RendezvousServer>> servers ABSL_GUARDED_BY(mu);

  ~Registry() {
    absl::MutexLock lock(&mu);
    if (getpid() != pid) {
      for (auto& s : servers) (void)s.release();
    }
    servers.clear();
  }
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

absl::StatusOr<UniqueId> make_unique_id() {
  auto config = Config::from_env();
  if (!config.ok()) return config.status();
  auto ip = transport::tcp::choose_listen_ip(config->socket_ifname);
  if (!ip.ok()) return ip.status();
  auto sa = transport::tcp::make_sockaddr(*ip, 0);
  if (!sa.ok()) return sa.status();
  auto bind_address = RendezvousAddress::from_sockaddr(sa->get(), sa->len);
  if (!bind_address.ok()) return bind_address.status();
  const uint64_t job_id = random_job_id();
  // Size 0: like ncclGetUniqueId, the caller does not say how many ranks will come.
  auto server = RendezvousServer::start(*bind_address, job_id, 0,
                                        Deadline::after(config->timeout));
  if (!server.ok()) return server.status();
  const UniqueId id = encode_unique_id((*server)->address(), job_id);
  Registry& reg = registry();
  absl::MutexLock lock(&reg.mu);
  std::erase_if(reg.servers, [](const auto& s) { return s->done(); });
  reg.servers.push_back(std::move(*server));
  return id;
}

}  // namespace weft
