#include "transport/tcp/linger.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <vector>

#include "src/base/mutex.hpp"

namespace weft::transport::tcp {
namespace {

// More sockets than this lingering at once (thousands of links torn down together) are
// closed at once instead: bounded memory and poll sets.
constexpr size_t kMaxLingering = 4096;
constexpr int kPollMs = 100;

class Reaper {
 public:
  // Returns false when full: the caller closes the socket itself.
  bool adopt(int fd) {
    MutexLock lock(&mu_);
    if (adopted_.size() >= kMaxLingering) return false;
    adopted_.push_back({fd, std::chrono::steady_clock::now() + std::chrono::seconds(kLingerSeconds)});
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();  // lives as long as the process
    }
    return true;
  }

 private:
  struct Lingering {
    int fd;
    std::chrono::steady_clock::time_point until;
  };

  void run() {
    std::vector<Lingering> mine;
    std::vector<pollfd> polls;
    char drop[4096];
    while (true) {
      {
        MutexLock lock(&mu_);
        for (const Lingering& l : adopted_) mine.push_back(l);
        adopted_.clear();
      }
      polls.clear();
      for (const Lingering& l : mine) polls.push_back({l.fd, POLLIN, 0});
      if (polls.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
        continue;
      }
      ::poll(polls.data(), polls.size(), kPollMs);
      const auto now = std::chrono::steady_clock::now();
      std::vector<Lingering> keep;
      for (size_t i = 0; i < mine.size(); ++i) {
        bool done = now >= mine[i].until;
        if (!done && polls[i].revents != 0) {
          const ssize_t n = ::recv(mine[i].fd, drop, sizeof drop, MSG_DONTWAIT);
          done = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
        }
        if (done) {
          ::close(mine[i].fd);
        } else {
          keep.push_back(mine[i]);
        }
      }
      mine.swap(keep);
    }
  }

  Mutex mu_;
  std::vector<Lingering> adopted_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

Reaper& reaper() {
  static Reaper* r = new Reaper;  // never destroyed: its thread may outlive static destruction
  return *r;
}

}  // namespace

void close_gracefully(int fd) {
  if (fd < 0) return;
  ::shutdown(fd, SHUT_WR);
  if (!reaper().adopt(fd)) ::close(fd);
}

}  // namespace weft::transport::tcp
