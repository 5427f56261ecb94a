// An isolated NVLink moves calls on streams off cuda_ipc (issue 25): three ranks of one host
// order allreduces on (stand-in) streams, GPU to GPU through the cuda_ipc windows; the fake
// NVML library then reports a CRC storm on the NVLink between rank 0's and rank 1's GPUs.
// Health judges the link FAILING, every rank isolates link 0-1 at the same call, and the
// calls from the one the switch names on stage through the host path, whose ring avoids the
// link. Once its quiet time is over the link comes back on probation, and calls on streams go
// GPU to GPU again, from the call that switch names. Every result stays exact, before, during
// and after. Run under mpirun with 3 ranks (tests/CMakeLists.txt).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/device/copier.hpp"
#include "src/engine.hpp"
#include "tools/expected.hpp"
#include "weft/mpi.hpp"

namespace weft {
namespace {

constexpr size_t kCount = (256 << 10) + 3;  // floats: 1 MiB and a bit

// Three GPUs, each NVLinked to the other two; `crc` flits in error on the link 0-1, both ends.
std::string nvml_state(uint64_t crc) {
  const char* bus[3] = {"00000000:18:00.0", "00000000:19:00.0", "00000000:1a:00.0"};
  std::string gpus;
  for (int g = 0; g < 3; ++g) {
    std::string links;
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == g) continue;
      const uint64_t flits = (g + peer == 1) ? crc : 0;  // the pair {0, 1}
      absl::StrAppend(&links, links.empty() ? "" : ", ", "{\"active\": true, \"remote_bus_id\": \"",
                      bus[peer], "\", \"crc_flit\": ", flits,
                      ", \"crc_data\": 0, \"replay\": 0, \"recovery\": 0}");
    }
    absl::StrAppend(&gpus, gpus.empty() ? "" : ", ", "{\"bus_id\": \"", bus[g],
                    "\", \"ecc\": {\"corrected\": 0, \"uncorrected\": 0}, \"nvlinks\": [", links,
                    "], \"xids\": []}");
  }
  return absl::StrCat("{\"gpus\": [", gpus, "]}");
}

void write_state(const std::string& path, uint64_t crc) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << nvml_state(crc);
  std::rename(tmp.c_str(), path.c_str());
}

bool any_rank(bool holds) {
  int mine = holds ? 1 : 0, any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any != 0;
}

uint64_t host_bytes(const Communicator& c) {
  uint64_t sent = 0;
  for (const LinkStats& l : c.link_stats()) sent += l.bytes_sent;
  return sent;
}

class CudaIpcIsolation : public ::testing::Test {
 protected:
  void SetUp() override {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 3) GTEST_SKIP() << "made for 3 ranks";
    // One state file for the job, named by rank 0.
    char path[256] = {};
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      std::snprintf(path, sizeof(path), "/tmp/weft-ipc-isolation-%d.json", static_cast<int>(getpid()));
      write_state(path, 0);
    }
    MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
    state_ = path;
    setenv("WEFT_NVML_LIBRARY", WEFT_FAKE_NVML_PATH, 1);
    setenv("WEFT_FAKE_NVML_STATE", path, 1);
    setenv("WEFT_HEALTH", "on", 1);
    setenv("WEFT_HEALTH_INTERVAL_MS", "50", 1);
    setenv("WEFT_HEALTH_WINDOW", "1", 1);
    setenv("WEFT_HEALTH_LOG", "off", 1);
    // Long enough for the host-path calls below to run while the link is isolated, even
    // under a sanitizer.
    setenv("WEFT_ISOLATE_QUIET", "5", 1);
    // Judges step down a second after the storm, well inside the quiet time: a judge still
    // FAILING when the link comes back isolates it again at once.
    setenv("WEFT_HEALTH_RECOVER", "1", 1);
  }
  void TearDown() override {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && !state_.empty()) std::remove(state_.c_str());
  }
  std::string state_;
};

TEST_F(CudaIpcIsolation, AnIsolatedNvlinkMovesCallsOnStreamsToTheHostPathAndBack) {
  auto comm = create_from_mpi(MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status();
  Communicator& c = **comm;
  device::StandInStream stream;
  std::vector<std::byte> send(kCount * 4), recv(kCount * 4);
  // One allreduce on the stream with fresh inputs; the wrong elements (count + 1 if it failed)
  // and the bytes this rank sent over host links meanwhile.
  int call = 0;
  auto allreduce = [&](uint64_t* moved) -> size_t {
    expected::fill(send.data(), kCount, DataType::kFloat32, ReduceOp::kSum, c.rank(), call);
    std::memset(recv.data(), 0xa5, recv.size());
    const uint64_t before = host_bytes(c);
    AllreduceOptions o;
    o.stream = &stream;
    absl::Status s = c.allreduce(send.data(), recv.data(), kCount, DataType::kFloat32, o);
    stream.synchronize();
    if (s.ok()) s = c.async_error();
    EXPECT_TRUE(s.ok()) << "call " << call << ": " << s;
    if (moved != nullptr) *moved = host_bytes(c) - before;
    return s.ok() ? expected::count_wrong_reduced(recv.data(), kCount, DataType::kFloat32,
                                                  ReduceOp::kSum, c.size(), call++)
                  : kCount + 1;
  };
  // Healthy: GPU to GPU, the host links carry only the call checks.
  for (int i = 0; i < 3; ++i) {
    uint64_t moved = 0;
    ASSERT_EQ(allreduce(&moved), 0u) << "call " << call;
    EXPECT_LT(moved, 64u << 10) << "call " << call << " crossed the host links";
  }
  // The storm, until both ends judge the NVLink FAILING and every rank isolated link 0-1:
  // bounded in count and time.
  if (c.rank() == 0) write_state(state_, 1000000);
  const int peer = c.rank() == 0 ? 1 : c.rank() == 1 ? 0 : -1;
  const auto link_is = [&](HealthState state) {
    for (const LinkHealth& h : c.health()) {
      if (h.scope.kind == "link" && h.scope.peer == peer && h.state == state) return true;
    }
    return false;
  };
  absl::Time give_up = absl::Now() + absl::Seconds(60);
  bool isolated = false;
  for (int i = 0; i < 2000 && !isolated; ++i) {
    ASSERT_EQ(allreduce(nullptr), 0u) << "call " << call;
    isolated = any_rank(link_is(HealthState::kIsolated));
    if (any_rank(absl::Now() > give_up)) break;
  }
  ASSERT_TRUE(isolated) << "link 0-1 was never isolated in " << call << " calls";
  // Calls already queued when it was adopted keep the path they were queued for; from
  // Engine::kMostQueued + 1 calls on, every call crosses the host path.
  for (size_t i = 0; i <= Engine::kMostQueued; ++i) {
    ASSERT_EQ(allreduce(nullptr), 0u) << "call " << call;
  }
  for (int i = 0; i < 3; ++i) {
    uint64_t moved = 0;
    ASSERT_EQ(allreduce(&moved), 0u) << "call " << call;
    EXPECT_GE(moved, kCount * 4 / 2) << "call " << call << " did not cross the host path";
  }
  // The storm was one jump of the counter, so the judges have stepped down: at the end of
  // the quiet time the link comes back on probation, adopted by every rank at one call.
  give_up = absl::Now() + absl::Seconds(60);
  bool back = false;
  for (int i = 0; i < 20000 && !back; ++i) {
    ASSERT_EQ(allreduce(nullptr), 0u) << "call " << call;
    back = any_rank(link_is(HealthState::kProbation));
    if (any_rank(absl::Now() > give_up)) break;
  }
  ASSERT_TRUE(back) << "link 0-1 never came back from isolation";
  ASSERT_FALSE(any_rank(link_is(HealthState::kIsolated))) << "isolated again on probation";
  for (size_t i = 0; i <= Engine::kMostQueued; ++i) {
    ASSERT_EQ(allreduce(nullptr), 0u) << "call " << call;
  }
  for (int i = 0; i < 3; ++i) {
    uint64_t moved = 0;
    ASSERT_EQ(allreduce(&moved), 0u) << "call " << call;
    EXPECT_LT(moved, 64u << 10) << "call " << call << " crossed the host links after the restore";
  }
}

}  // namespace
}  // namespace weft
