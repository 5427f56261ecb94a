// Isolate and reroute (docs/HEALTH.md, "Isolation"): a link whose health turns FAILING is
// isolated on every rank at the end of the same call, the ring moves off it, and every result
// stays exact, before, during and after; on probation a link still failing is isolated again.
// Run under mpirun with 4 ranks over tcp (tests/CMakeLists.txt); the fault is
// WEFT_INJECT_CORRUPT on link 1-2 with checksums on, which the link survives (it resends) and
// which its health counts (link_checksum_errors).
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/multirank/world.hpp"
#include "tools/expected.hpp"
#include "weft/mpi.hpp"

namespace weft {
namespace {

using testing::g_world;

constexpr size_t kCount = (256 << 10) + 3;  // floats: 1 MiB and a bit

std::vector<std::byte>& buffer(int which) {
  static std::vector<std::byte> b[2] = {std::vector<std::byte>(kCount * 4),
                                        std::vector<std::byte>(kCount * 4)};
  return b[which];
}

// One ring allreduce with fresh inputs; the wrong elements (count + 1 if the call failed).
size_t allreduce(Communicator& c, int call) {
  std::byte* send = buffer(0).data();
  std::byte* recv = buffer(1).data();
  expected::fill(send, kCount, DataType::kFloat32, ReduceOp::kSum, c.rank(), call);
  std::memset(recv, 0xa5, kCount * 4);
  absl::Status s = c.allreduce(send, recv, kCount, DataType::kFloat32);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return kCount + 1;
  return expected::count_wrong_reduced(recv, kCount, DataType::kFloat32, ReduceOp::kSum, c.size(),
                                       call);
}

// Whether any rank says `holds`.
bool any_rank(bool holds) {
  int mine = holds ? 1 : 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any != 0;
}

// This rank's link to `peer` as its health last showed it.
HealthState link_state(const Communicator& c, int peer) {
  for (const LinkHealth& h : c.health()) {
    if (h.scope.kind == "link" && h.scope.peer == peer) return h.state;
  }
  return HealthState::kHealthy;
}

uint64_t bytes_sent_to(const Communicator& c, int peer) {
  for (const LinkStats& l : c.link_stats()) {
    if (l.peer == peer) return l.bytes_sent;
  }
  return 0;
}

class Reroute : public ::testing::Test {
 protected:
  void SetUp() override {
    if (g_world->size() != 4) GTEST_SKIP() << "made for 4 ranks";
    setenv("WEFT_INJECT_CORRUPT", "1e-5@2-1", 1);  // rank 2 corrupts what it gets from rank 1
    setenv("WEFT_CHECKSUM", "1", 1);
    setenv("WEFT_HEALTH", "on", 1);
    setenv("WEFT_HEALTH_INTERVAL_MS", "50", 1);
    setenv("WEFT_HEALTH_THRESHOLDS", "link_checksum_errors=-/1", 1);
    setenv("WEFT_HEALTH_LOG", "off", 1);
  }
  void TearDown() override {
    for (const char* v : {"WEFT_INJECT_CORRUPT", "WEFT_CHECKSUM", "WEFT_HEALTH_INTERVAL_MS",
                          "WEFT_HEALTH_THRESHOLDS", "WEFT_HEALTH_LOG", "WEFT_ISOLATE_QUIET",
                          "WEFT_HEALTH_RECOVER"}) {
      unsetenv(v);
    }
  }
};

TEST_F(Reroute, AFailingLinkIsIsolatedAndTheRingMovesOffIt) {
  setenv("WEFT_ISOLATE_QUIET", "3600", 1);
  auto comm = create_from_mpi(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Communicator& c = **comm;
  const int rank = c.rank();
  const int peer = rank == 1 ? 2 : rank == 2 ? 1 : -1;  // the faulty link's other end
  // Calls until an end of link 1-2 shows it ISOLATED: bounded in count and time.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  int call = 0;
  bool isolated = false;
  for (; call < 2000 && !isolated; ++call) {
    ASSERT_EQ(allreduce(c, call), 0u) << "call " << call;
    isolated = any_rank(peer >= 0 && link_state(c, peer) == HealthState::kIsolated);
    if (any_rank(absl::Now() > give_up)) break;
  }
  ASSERT_TRUE(isolated) << "link 1-2 was never isolated in " << call << " calls";
  // Every rank adopted the change at the same call, so the next calls run on the new ring:
  // link 1-2 carries the call check's few bytes, none of the 1 MiB vectors.
  const uint64_t before = peer >= 0 ? bytes_sent_to(c, peer) : 0;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(allreduce(c, ++call), 0u);
  if (peer >= 0) {
    EXPECT_LT(bytes_sent_to(c, peer) - before, 4096u) << "rank " << rank << " still sends to "
                                                      << peer << " over the isolated link";
    EXPECT_EQ(link_state(c, peer), HealthState::kIsolated) << "quiet for an hour";
  }
}

TEST_F(Reroute, ALinkStillFailingOnProbationIsIsolatedAgain) {
  setenv("WEFT_ISOLATE_QUIET", "0.2", 1);
  setenv("WEFT_HEALTH_RECOVER", "5", 1);
  auto comm = create_from_mpi(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Communicator& c = **comm;
  const int rank = c.rank();
  const int peer = rank == 1 ? 2 : rank == 2 ? 1 : -1;
  // This rank's changes of the link: ISOLATED, PROBATION, ISOLATED again is the cycle.
  std::vector<HealthState> seen;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  bool cycled = false;
  for (int call = 0; call < 4000 && !cycled; ++call) {
    ASSERT_EQ(allreduce(c, call), 0u) << "call " << call;
    while (auto change = c.next_health_change()) {
      if (change->scope.kind == "link" && change->scope.peer == peer &&
          (change->to == HealthState::kIsolated || change->to == HealthState::kProbation)) {
        seen.push_back(change->to);
      }
    }
    const bool mine = seen.size() >= 3 && seen[0] == HealthState::kIsolated &&
                      seen[1] == HealthState::kProbation && seen[2] == HealthState::kIsolated;
    cycled = any_rank(mine);
    if (any_rank(absl::Now() > give_up)) break;
  }
  EXPECT_TRUE(cycled) << "rank " << rank << " saw " << seen.size() << " isolation changes";
}

}  // namespace
}  // namespace weft
