// Rails for tests: several network interfaces in a private network namespace.
//
// A tcp link stripes over rails only when both ends have several interfaces in matching
// subnets, which a test host rarely offers. As root, the calling thread moves into a network
// namespace of its own (unshare(CLONE_NEWNET); threads it starts later follow it, so ranks
// that are threads of the test share it) and gets two interfaces there: the ends of one veth
// pair, weftr0 = 198.18.0.1/24 and weftr1 = 198.18.1.1/24 (198.18.0.0/15 is reserved for
// benchmarks, so it never clashes with a real network), plus weftr2, another veth end
// (198.18.2.1/24), left down. Traffic between local addresses is delivered locally, so the
// pair's other end needs nothing. The destructor deletes the interfaces and moves the
// thread back; the namespace itself goes when its last socket closes.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace weft::testing {

class RailNamespace {
 public:
  RailNamespace() {
    if (::geteuid() != 0) {
      why_not_ = "needs root (unshare(CLONE_NEWNET) and ip link add)";
      return;
    }
    home_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home_ < 0) {
      why_not_ = std::string("cannot open /proc/thread-self/ns/net: ") + std::strerror(errno);
      return;
    }
    if (::unshare(CLONE_NEWNET) != 0) {
      why_not_ = std::string("unshare(CLONE_NEWNET) failed: ") + std::strerror(errno);
      return;
    }
    entered_ = true;
    for (const char* cmd : {
             "ip link set lo up",
             "ip link add weftr0 type veth peer name weftr1",
             "ip addr add 198.18.0.1/24 dev weftr0",
             "ip addr add 198.18.1.1/24 dev weftr1",
             "ip link set weftr0 up",
             "ip link set weftr1 up",
             "ip link add weftr2 type veth peer name weftx2",
             "ip addr add 198.18.2.1/24 dev weftr2",
         }) {
      if (run(cmd) != 0) {
        why_not_ = std::string("'") + cmd + "' failed in the test's network namespace (is "
                   "iproute2 installed, veth available?)";
        return;
      }
    }
  }

  ~RailNamespace() {
    if (entered_) {
      run("ip link del weftr0");
      run("ip link del weftr2");
      if (home_ >= 0) ::setns(home_, CLONE_NEWNET);
    }
    if (home_ >= 0) ::close(home_);
  }
  RailNamespace(const RailNamespace&) = delete;
  RailNamespace& operator=(const RailNamespace&) = delete;

  /// Empty once the interfaces are there; otherwise why they are not (for GTEST_SKIP).
  const std::string& why_not() const { return why_not_; }

  /// Drops every tcp packet to `ip` (one of the rails' addresses), as a partition of that
  /// rail would, until the namespace goes; false when iptables cannot.
  bool drop_tcp_to(const std::string& ip) {
    return entered_ && run(("iptables -A INPUT -p tcp -d " + ip + " -j DROP").c_str()) == 0;
  }

 private:
  // The child of system() starts in the calling thread's namespace.
  static int run(const char* cmd) {
    return std::system((std::string(cmd) + " >/dev/null 2>&1").c_str());
  }

  int home_ = -1;
  bool entered_ = false;
  std::string why_not_;
};

}  // namespace weft::testing

/// Starts a test body in a RailNamespace named `ns`, or skips the test saying why it cannot.
#define WEFT_REQUIRE_RAILS(ns)              \
  ::weft::testing::RailNamespace ns;        \
  if (!ns.why_not().empty()) GTEST_SKIP() << "no rails for this test: " << ns.why_not()
