// Links that survive a path failure (transport/tcp/pair.hpp): every collective, with the path
// that carries its bytes killed at each point of the message (before the first byte, inside a
// frame header, mid-payload, after the last byte before it is acknowledged), completes exactly
// on the link's other path, and the link keeps working. Run under mpirun over tcp with two
// sockets per rail (tests/CMakeLists.txt), so every link has a path to move to.
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/multirank/world.hpp"
#include "tools/expected.hpp"
#include "weft/mpi.hpp"

namespace weft {
namespace {

using testing::g_world;

struct Case {
  const char* name;
  size_t count;  ///< elements (per rank for allgather and reduce-scatter)
  // Runs the collective once on `comm` with fresh inputs and returns the wrong elements.
  std::function<size_t(Communicator&, size_t)> run;
};

std::vector<std::byte>& buffer(int which) {
  static std::vector<std::byte> b[2] = {std::vector<std::byte>(64 << 20),
                                        std::vector<std::byte>(64 << 20)};
  return b[which];
}

// In place, the ring's allgather writes over bytes its reduce-scatter lent (Pair::lend_some),
// before they are acknowledged: a resumption must not send those again from there.
size_t run_allreduce(Communicator& c, size_t count, const char* algorithm, bool in_place = false) {
  std::byte* send = buffer(0).data();
  std::byte* recv = in_place ? send : buffer(1).data();
  expected::fill(send, count, DataType::kFloat32, ReduceOp::kSum, c.rank(), 0);
  if (!in_place) std::memset(recv, 0xa5, count * 4);
  AllreduceOptions o;
  o.algorithm = algorithm;
  absl::Status s = c.allreduce(send, recv, count, DataType::kFloat32, o);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return count + 1;
  return expected::count_wrong_reduced(recv, count, DataType::kFloat32, ReduceOp::kSum, c.size(), 0);
}

size_t run_allgather(Communicator& c, size_t count) {
  const int n = c.size();
  std::byte* send = buffer(0).data();
  std::byte* recv = buffer(1).data();
  expected::fill(send, count, DataType::kInt32, ReduceOp::kSum, c.rank(), c.rank() * count);
  std::memset(recv, 0xa5, count * n * 4);
  absl::Status s = c.allgather(send, recv, count, DataType::kInt32);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return count + 1;
  size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    wrong += expected::count_wrong_copied(recv + r * count * 4, count, DataType::kInt32,
                                          ReduceOp::kSum, r, r * count);
  }
  return wrong;
}

size_t run_reduce_scatter(Communicator& c, size_t count) {
  const int n = c.size();
  std::byte* send = buffer(0).data();
  std::byte* recv = buffer(1).data();
  expected::fill(send, count * n, DataType::kFloat64, ReduceOp::kSum, c.rank(), 0);
  std::memset(recv, 0xa5, count * 8);
  ReduceScatterOptions o;
  absl::Status s = c.reduce_scatter(send, recv, count, DataType::kFloat64, o);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return count + 1;
  // This rank's block of the reduced vector starts at element rank * count.
  return expected::count_wrong_reduced(recv, count, DataType::kFloat64, ReduceOp::kSum, n,
                                       c.rank() * count);
}

size_t run_broadcast(Communicator& c, size_t count) {
  const int root = 1 % c.size();
  std::byte* send = buffer(0).data();
  std::byte* recv = buffer(1).data();
  if (c.rank() == root) expected::fill(send, count, DataType::kUint8, ReduceOp::kSum, root, 0);
  std::memset(recv, 0xa5, count);
  BroadcastOptions o;
  o.root = root;
  absl::Status s = c.broadcast(send, recv, count, DataType::kUint8, o);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return count + 1;
  return expected::count_wrong_copied(recv, count, DataType::kUint8, ReduceOp::kSum, root, 0);
}

size_t run_barrier(Communicator& c, size_t) {
  absl::Status s = c.barrier();
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? 0 : 1;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"allreduce ring", (1 << 20) + 3,
       [](Communicator& c, size_t n) { return run_allreduce(c, n, "ring"); }},
      {"allreduce ring in place", (1 << 20) + 3,
       [](Communicator& c, size_t n) { return run_allreduce(c, n, "ring", /*in_place=*/true); }},
      {"allreduce recursive_doubling", 1021,
       [](Communicator& c, size_t n) { return run_allreduce(c, n, "recursive_doubling"); }},
      {"allgather", 300007, run_allgather},
      {"reduce_scatter", 200003, run_reduce_scatter},
      {"broadcast", (3 << 20) + 1, run_broadcast},
      {"barrier", 0, run_barrier},
  };
  return all;
}

void set_env(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

std::unique_ptr<Communicator> make_comm() {
  auto comm = create_from_mpi(MPI_COMM_WORLD);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? *std::move(comm) : nullptr;
}

// Where rank 0 sends most in one call of `c`, and how many stream bytes it sends there.
std::pair<int, uint64_t> busiest_link(const Case& c) {
  unsetenv("WEFT_INJECT_PATH_KILL");
  auto comm = make_comm();
  if (comm == nullptr) return {-1, 0};
  EXPECT_EQ(c.run(*comm, c.count), 0u) << c.name << " without a fault";
  int peer = -1;
  uint64_t bytes = 0;
  for (const LinkStats& l : comm->link_stats()) {
    if (l.bytes_sent > bytes) peer = l.peer, bytes = l.bytes_sent;
  }
  long long out[2] = {peer, static_cast<long long>(bytes)};
  MPI_Bcast(out, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  return {static_cast<int>(out[0]), static_cast<uint64_t>(out[1])};
}

struct Point {
  const char* name;
  std::function<std::string(uint64_t bytes)> at;  ///< WEFT_INJECT_PATH_KILL's @ part
};

const Point kPoints[] = {
    {"before the first byte", [](uint64_t) { return std::string("0"); }},
    {"inside the first frame's header", [](uint64_t) { return std::string("0+h13"); }},
    {"mid-payload", [](uint64_t b) { return absl::StrCat(b / 2 + 1); }},
    {"after the last byte, before its acknowledgement", [](uint64_t b) { return absl::StrCat(b); }},
};

TEST(PathFailover, EveryCollectiveCompletesOnTheOtherPath) {
  ASSERT_GE(g_world->size(), 2);
  for (const Case& c : cases()) {
    const auto [peer, bytes] = busiest_link(c);
    ASSERT_GE(peer, 0) << c.name << ": rank 0 sent nothing";
    for (const Point& p : kPoints) {
      const std::string what = absl::StrCat(c.name, ", path killed ", p.name, " (rank 0 -> ",
                                            peer, ", ", bytes, " bytes)");
      set_env("WEFT_INJECT_PATH_KILL", absl::StrCat("0>", peer, "@", p.at(bytes)));
      auto comm = make_comm();
      ASSERT_NE(comm, nullptr) << what;
      EXPECT_EQ(c.run(*comm, c.count), 0u) << what;
      // The link carries on: the next call is exact too.
      EXPECT_EQ(c.run(*comm, c.count), 0u) << what << ", the call after";
      if (g_world->rank() == 0) {
        uint64_t failures = 0;
        int dead = 0, alive = 0;
        for (const LinkStats& l : comm->link_stats()) {
          if (l.peer != peer) continue;
          failures = l.path_failures;
          for (const PathStats& path : l.paths) {
            if (path.alive) {
              ++alive;
            } else {
              ++dead;
              EXPECT_NE(path.failure.find("WEFT_INJECT_PATH_KILL"), std::string::npos)
                  << what << ": " << path.name << " died of " << path.failure;
            }
          }
        }
        EXPECT_GE(failures, 1u) << what << ": the fault never fired";
        EXPECT_EQ(dead, 1) << what << ": one path killed";
        EXPECT_EQ(alive, 1) << what << ": the other path carried on";
      }
      // No rank closes its links (its paths would end) before rank 0 has looked at them.
      MPI_Barrier(MPI_COMM_WORLD);
      unsetenv("WEFT_INJECT_PATH_KILL");
    }
  }
}

// Silent corruption on one link (WEFT_INJECT_CORRUPT flips bits after the sender's CRC and
// before the receiver's check): with WEFT_CHECKSUM=1 every result stays exact, the receiver
// counts the mismatches and the sender sends the frames again; without, the wrong elements
// reach the results and the check sees them.
TEST(PathFailover, ChecksumsCatchCorruption) {
  if (g_world->size() < 2) GTEST_SKIP();
  constexpr size_t kCount = (1 << 20) + 3;  // 4 MiB of floats
  constexpr int kCalls = 4;
  set_env("WEFT_INJECT_CORRUPT", "1e-6@1-0");  // rank 1 corrupts what it gets from rank 0
  set_env("WEFT_CHECKSUM", "1");
  {
    auto comm = make_comm();
    ASSERT_NE(comm, nullptr);
    for (int i = 0; i < kCalls; ++i) EXPECT_EQ(run_allreduce(*comm, kCount, "ring"), 0u);
    long long mine[2] = {0, 0};
    for (const LinkStats& l : comm->link_stats()) {
      if (g_world->rank() == 1 && l.peer == 0) mine[0] = static_cast<long long>(l.checksum_errors);
      if (g_world->rank() == 0 && l.peer == 1) mine[1] = static_cast<long long>(l.resumptions);
    }
    long long all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_GE(all[0], 1) << "rank 1 saw no CRC32C mismatch from rank 0";
    EXPECT_GE(all[1], 1) << "rank 0 never sent again";
  }
  set_env("WEFT_CHECKSUM", "0");
  {
    auto comm = make_comm();
    ASSERT_NE(comm, nullptr);
    long long wrong = 0;
    for (int i = 0; i < kCalls; ++i) {
      // A flipped bit may land in a call's agreement rather than its data: then the call
      // fails instead, which also shows the corruption.
      std::byte* send = buffer(0).data();
      std::byte* recv = buffer(1).data();
      expected::fill(send, kCount, DataType::kFloat32, ReduceOp::kSum, comm->rank(), 0);
      AllreduceOptions o;
      o.algorithm = "ring";
      if (!comm->allreduce(send, recv, kCount, DataType::kFloat32, o).ok()) {
        wrong += 1;
        break;
      }
      wrong += static_cast<long long>(expected::count_wrong_reduced(
          recv, kCount, DataType::kFloat32, ReduceOp::kSum, comm->size(), 0));
    }
    long long total = 0;
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_GE(total, 1) << "corruption without checksums went unseen: the fault did not fire";
  }
  unsetenv("WEFT_INJECT_CORRUPT");
  unsetenv("WEFT_CHECKSUM");
}

}  // namespace
}  // namespace weft
