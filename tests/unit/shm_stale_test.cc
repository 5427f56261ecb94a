// Stale shared-memory rings: what a killed job leaves in /dev/shm, and the sweep that every
// new communicator (and `weft cleanup`) runs to remove it.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "transport/shm/ring.hpp"
#include "transport/shm/stale.hpp"

namespace weft::transport {
namespace {

// A job killed before a ring's peer attached leaves the name behind; the sweep every new
// communicator runs (and `weft cleanup`) removes it once its creator is gone, and never
// touches a ring whose creator still runs.
TEST(ShmTransport, StaleRingsOfDeadCreatorsAreSwept) {
  const std::string dead = absl::StrCat("weft-test-stale-", getpid(), "-dead");
  const std::string live = absl::StrCat("weft-test-stale-", getpid(), "-live");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ring = shm::Ring::create("/" + dead, 1 << 16);
    if (ring.ok()) ::kill(::getpid(), SIGKILL);  // no destructor: the name stays
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child could not create its ring";
  auto kept = shm::Ring::create("/" + live, 1 << 16);
  ASSERT_TRUE(kept.ok()) << kept.status();
  auto state_of = [](const std::vector<shm::SharedSegment>& all, const std::string& name) {
    for (const auto& s : all) {
      if (s.name == name) return s.state + (s.removed ? " removed" : "");
    }
    return std::string("absent");
  };
  auto listed = shm::sweep_stale_rings(/*dry_run=*/true);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(state_of(*listed, dead), "stale");
  EXPECT_EQ(state_of(*listed, live), "live");
  auto swept = shm::sweep_stale_rings(/*dry_run=*/false);
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(state_of(*swept, dead), "stale removed");
  EXPECT_EQ(state_of(*swept, live), "live");
  auto after = shm::sweep_stale_rings(/*dry_run=*/true);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(state_of(*after, dead), "absent");
  EXPECT_EQ(state_of(*after, live), "live");
}

// A creator killed while it made a ring leaves a header that never became ready. Such a
// segment is left alone while it is young (its creator may still be writing the header)
// and removed once it is older than any creator takes.
TEST(ShmTransport, HalfMadeRingsAreSweptOnceOld) {
  const std::string name = absl::StrCat("weft-test-halfmade-", getpid());
  const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(ftruncate(fd, 1 << 16), 0);  // zeros: no magic, no ready bit
  ::close(fd);
  auto state_of = [&](int abandoned_after, bool dry_run) {
    auto all = shm::sweep_stale_rings(dry_run, abandoned_after);
    EXPECT_TRUE(all.ok()) << all.status();
    for (const auto& s : *all) {
      if (s.name == name) return s.state + (s.removed ? " removed" : "");
    }
    return std::string("absent");
  };
  EXPECT_EQ(state_of(shm::kAbandonedAfterSeconds, /*dry_run=*/true), "unknown");
  // Old enough for a 2 s limit: no ring another test is making right now is that old.
  ::sleep(3);
  EXPECT_EQ(state_of(2, /*dry_run=*/true), "abandoned");
  EXPECT_EQ(state_of(2, /*dry_run=*/false), "abandoned removed");
  EXPECT_EQ(state_of(2, /*dry_run=*/true), "absent");
  shm_unlink(("/" + name).c_str());  // in case an expectation failed
}

}  // namespace
}  // namespace weft::transport
