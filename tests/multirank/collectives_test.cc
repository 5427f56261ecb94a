// Every collective x type x op x in/out-of-place x size, checked exactly on every rank.
// Run by ctest under mpirun with several rank counts and transports (tests/CMakeLists.txt).
// With COLLECTIVES_ON_STREAM=1 (and WEFT_DEVICE_STAND_IN=on) the sweeps order each call on a
// stand-in stream and wait for it there: they then test the path calls on streams take
// (src/engine.hpp), the cuda_ipc windows or, with WEFT_CUDA_IPC=off, the staging buffers.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/multirank/world.hpp"
#include "tools/expected.hpp"
#include "src/base/env.hpp"
#include "src/device/copier.hpp"

namespace weft {
namespace {

using testing::g_world;

constexpr size_t kMiB = size_t{1} << 20;

// The sweeps' stream (COLLECTIVES_ON_STREAM), or null: calls on the host path.
device::StandInStream* sweep_stream() {
  static device::StandInStream* const stream =
      read_env("COLLECTIVES_ON_STREAM").has_value() ? new device::StandInStream : nullptr;
  return stream;
}
template <typename Options>
Options on_stream(Options o) {
  o.stream = sweep_stream();
  return o;
}
// A call's status, once its stream (if any) has run it: a failure after it returned is the
// communicator's async error.
absl::Status finished(absl::Status s) {
  if (!s.ok() || sweep_stream() == nullptr) return s;
  sweep_stream()->synchronize();
  return g_world->async_error();
}

// Element counts of the sweep: 0, 1, 7, 1023, 100003 (a prime: 100-800 KiB, cache-resident
// pushes at two ranks over shm), 1 MiB + 3 elements and 64 MiB. For allgather and
// reduce_scatter the 64 MiB case is the whole gathered buffer (count = 64 MiB / size per
// rank), which keeps CI inside its time budget at 5 ranks on 2 cores.
std::vector<size_t> counts_for(DataType type, bool per_rank) {
  const size_t elem = size_of(type);
  const size_t big = 64 * kMiB / elem / (per_rank ? g_world->size() : 1);
  return {0, 1, 7, 1023, 100003, kMiB / elem + 3, big};
}

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt8,   DataType::kUint8,
                               DataType::kInt32,   DataType::kUint32,  DataType::kInt64,
                               DataType::kUint64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kAvg};

// Buffers sized for the largest case, allocated and touched once for the whole run.
std::vector<std::byte>& send_buffer() {
  static std::vector<std::byte> b(64 * kMiB + 64 * kMiB / 8 * 8 + 64);
  return b;
}
std::vector<std::byte>& recv_buffer() {
  static std::vector<std::byte> b(64 * kMiB + 64 * kMiB / 8 * 8 + 64);
  return b;
}

std::string describe(const char* what, DataType t, ReduceOp op, size_t count, bool in_place) {
  return absl::StrCat(what, " ", name_of(t), " ", name_of(op), " count=", count,
                      in_place ? " in-place" : " out-of-place", " ranks=", g_world->size());
}

TEST(Collectives, Allreduce) {
  const int rank = g_world->rank(), n = g_world->size();
  for (DataType t : kTypes) {
    const size_t elem = size_of(t);
    for (ReduceOp op : kOps) {
      for (size_t count : counts_for(t, false)) {
        for (bool in_place : {false, true}) {
          std::byte* recv = recv_buffer().data();
          std::byte* send = in_place ? recv : send_buffer().data();
          expected::fill(send, count, t, op, rank, 0);
          if (!in_place) std::memset(recv, 0xa5, count * elem);
          AllreduceOptions o;
          o.op = op;
          absl::Status s = finished(g_world->allreduce(send, recv, count, t, on_stream(o)));
          ASSERT_TRUE(s.ok()) << describe("allreduce", t, op, count, in_place) << ": " << s;
          EXPECT_EQ(expected::count_wrong_reduced(recv, count, t, op, n, 0), 0u)
              << describe("allreduce", t, op, count, in_place);
          if (!in_place) {
            EXPECT_EQ(expected::count_wrong_copied(send, count, t, op, rank, 0), 0u)
                << "send buffer changed: " << describe("allreduce", t, op, count, in_place);
          }
        }
      }
    }
  }
}

TEST(Collectives, ReduceScatter) {
  const int rank = g_world->rank(), n = g_world->size();
  for (DataType t : kTypes) {
    const size_t elem = size_of(t);
    for (ReduceOp op : kOps) {
      for (size_t count : counts_for(t, true)) {
        for (bool in_place : {false, true}) {
          std::byte* send = send_buffer().data();
          expected::fill(send, count * n, t, op, rank, 0);
          std::byte* recv = in_place ? send + rank * count * elem : recv_buffer().data();
          if (!in_place) std::memset(recv, 0xa5, count * elem);
          ReduceScatterOptions o;
          o.op = op;
          absl::Status s = finished(g_world->reduce_scatter(send, recv, count, t, on_stream(o)));
          ASSERT_TRUE(s.ok()) << describe("reduce_scatter", t, op, count, in_place) << ": " << s;
          EXPECT_EQ(expected::count_wrong_reduced(recv, count, t, op, n, rank * count), 0u)
              << describe("reduce_scatter", t, op, count, in_place);
        }
      }
    }
  }
}

TEST(Collectives, Allgather) {
  const int rank = g_world->rank(), n = g_world->size();
  for (DataType t : kTypes) {
    const size_t elem = size_of(t);
    for (size_t count : counts_for(t, true)) {
      for (bool in_place : {false, true}) {
        std::byte* recv = recv_buffer().data();
        std::memset(recv, 0xa5, count * n * elem);
        std::byte* send = in_place ? recv + rank * count * elem : send_buffer().data();
        // Rank r contributes elements r*count.. of the pattern, so the result is one vector.
        expected::fill(send, count, t, ReduceOp::kSum, rank, rank * count);
        absl::Status s =
            finished(g_world->allgather(send, recv, count, t, on_stream(AllgatherOptions{})));
        ASSERT_TRUE(s.ok()) << describe("allgather", t, ReduceOp::kSum, count, in_place) << ": " << s;
        size_t wrong = 0;
        for (int r = 0; r < n; ++r) {
          wrong += expected::count_wrong_copied(recv + r * count * elem, count, t, ReduceOp::kSum,
                                                r, r * count);
        }
        EXPECT_EQ(wrong, 0u) << describe("allgather", t, ReduceOp::kSum, count, in_place);
      }
    }
  }
}

TEST(Collectives, Broadcast) {
  const int rank = g_world->rank(), n = g_world->size();
  for (DataType t : kTypes) {
    const size_t elem = size_of(t);
    for (size_t count : counts_for(t, false)) {
      for (bool in_place : {false, true}) {
        // Roots cycle through the ranks, so every position in the chain is exercised.
        const int root = static_cast<int>((count + (in_place ? 1 : 0) + static_cast<size_t>(t)) % n);
        std::byte* recv = recv_buffer().data();
        std::byte* send = in_place ? recv : send_buffer().data();
        std::memset(recv, 0xa5, count * elem);
        if (rank == root) expected::fill(send, count, t, ReduceOp::kSum, root, 0);
        BroadcastOptions o;
        o.root = root;
        absl::Status s = finished(g_world->broadcast(send, recv, count, t, on_stream(o)));
        ASSERT_TRUE(s.ok()) << describe("broadcast", t, ReduceOp::kSum, count, in_place) << ": " << s;
        EXPECT_EQ(expected::count_wrong_copied(recv, count, t, ReduceOp::kSum, root, 0), 0u)
            << describe("broadcast", t, ReduceOp::kSum, count, in_place) << " root=" << root;
      }
    }
  }
}

TEST(Collectives, BarrierRepeats) {
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(g_world->barrier().ok());
}

// Every algorithm forced by name gives the same exact results (small, odd sizes), in place
// and out of place; one that is for two ranks is refused (without failing the communicator)
// elsewhere.
TEST(Collectives, EveryAllreduceAlgorithm) {
  const int rank = g_world->rank(), n = g_world->size();
  for (const char* algorithm : {"ring", "recursive_doubling", "exchange", "push", "direct"}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{122}, size_t{100003},
                         size_t{1000003}}) {
      for (bool in_place : {false, true}) {
        std::byte* recv = recv_buffer().data();
        std::byte* send = in_place ? recv : send_buffer().data();
        expected::fill(send, count, DataType::kInt32, ReduceOp::kSum, rank, 0);
        AllreduceOptions o;
        o.algorithm = algorithm;
        absl::Status s = g_world->allreduce(send, recv, count, DataType::kInt32, o);
        const std::string what = describe(algorithm, DataType::kInt32, ReduceOp::kSum, count, in_place);
        if ((std::string(algorithm) == "exchange" || std::string(algorithm) == "push") && n != 2) {
          EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
          continue;
        }
        ASSERT_TRUE(s.ok()) << what << ": " << s;
        EXPECT_EQ(expected::count_wrong_reduced(recv, count, DataType::kInt32, ReduceOp::kSum, n, 0), 0u)
            << what;
      }
    }
  }
  ASSERT_TRUE(g_world->barrier().ok()) << "a refused algorithm must not fail the communicator";
}

// Where the order of two operands changes the bits (max and min of +0 and -0, or of NaNs
// with different payloads), every rank still ends with the same bits, whichever algorithm
// computed them: ranks of one job must not drift apart. Each rank gives a zero signed by its
// parity and a quiet NaN whose payload is its rank + 1. (Sum and prod of two NaNs keep
// whichever payload the FPU picks, which is not part of the contract: reduce_kernels.hpp.)
TEST(Collectives, EveryRankHoldsTheSameBits) {
  const int rank = g_world->rank(), n = g_world->size();
  struct Format {
    DataType type;
    uint64_t sign, quiet_nan;
  };
  constexpr Format kFormats[] = {{DataType::kFloat32, 0x80000000u, 0x7fc00000u},
                                 {DataType::kFloat64, uint64_t{1} << 63, 0x7ff8000000000000u},
                                 {DataType::kFloat16, 0x8000u, 0x7e00u},
                                 {DataType::kBFloat16, 0x8000u, 0x7fc0u}};
  for (const Format& f : kFormats) {
    const size_t elem = size_of(f.type);
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      for (const char* algorithm : {"ring", "recursive_doubling", "exchange", "push", "direct"}) {
        if ((std::string(algorithm) == "exchange" || std::string(algorithm) == "push") && n != 2) {
          continue;
        }
        for (size_t count : {size_t{1}, size_t{3}, size_t{100003}}) {
          for (bool in_place : {false, true}) {
            std::byte* recv = recv_buffer().data();
            std::byte* send = in_place ? recv : send_buffer().data();
            for (size_t i = 0; i < count; ++i) {
              const uint64_t bits = i % 2 == 0 ? (rank % 2 == 1 ? f.sign : 0)
                                               : f.quiet_nan | static_cast<uint64_t>(rank + 1);
              std::memcpy(send + i * elem, &bits, elem);  // little-endian: the low bytes
            }
            AllreduceOptions o;
            o.op = op;
            o.algorithm = algorithm;
            const std::string what = describe(algorithm, f.type, op, count, in_place);
            ASSERT_TRUE(g_world->allreduce(send, recv, count, f.type, o).ok()) << what;
            const size_t bytes = count * elem;
            std::vector<std::byte> all(bytes * n);
            ASSERT_TRUE(g_world->allgather(recv, all.data(), bytes, DataType::kUint8).ok()) << what;
            for (int r = 1; r < n; ++r) {
              EXPECT_EQ(std::memcmp(all.data(), all.data() + r * bytes, bytes), 0)
                  << what << ": rank " << r << " holds other bits than rank 0";
            }
          }
        }
      }
    }
  }
}

// Every allgather algorithm forced by name gives exact results; recursive doubling, which
// needs a power-of-two rank count, is refused (without failing the communicator) elsewhere.
TEST(Collectives, EveryAllgatherAlgorithm) {
  const int rank = g_world->rank(), n = g_world->size();
  const bool power_of_two = (n & (n - 1)) == 0;
  for (const char* algorithm : {"ring", "recursive_doubling", "direct"}) {
    for (size_t count : {size_t{1}, size_t{3}, size_t{100003}}) {
      std::byte* recv = recv_buffer().data();
      std::memset(recv, 0xa5, count * n * 4);
      expected::fill(recv + rank * count * 4, count, DataType::kInt32, ReduceOp::kSum, rank,
                     rank * count);
      AllgatherOptions o;
      o.algorithm = algorithm;
      absl::Status s = g_world->allgather(recv + rank * count * 4, recv, count, DataType::kInt32, o);
      if (std::string(algorithm) == "recursive_doubling" && !power_of_two) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
        continue;
      }
      ASSERT_TRUE(s.ok()) << algorithm << ": " << s;
      size_t wrong = 0;
      for (int r = 0; r < n; ++r) {
        wrong += expected::count_wrong_copied(recv + r * count * 4, count, DataType::kInt32,
                                              ReduceOp::kSum, r, r * count);
      }
      EXPECT_EQ(wrong, 0u) << algorithm << " count=" << count;
    }
  }
  ASSERT_TRUE(g_world->barrier().ok()) << "a refused algorithm must not fail the communicator";
}

// Every broadcast algorithm forced by name gives exact results from every root, in place
// and out of place: 48 int32 (192 B) ride with the call check's state in recursive doubling,
// 49 do not.
TEST(Collectives, EveryBroadcastAlgorithm) {
  const int rank = g_world->rank(), n = g_world->size();
  for (const char* algorithm : {"chain", "recursive_doubling"}) {
    for (size_t count : {size_t{1}, size_t{48}, size_t{49}, size_t{100003}}) {
      for (int root = 0; root < n; ++root) {
        for (bool in_place : {false, true}) {
          std::byte* recv = recv_buffer().data();
          std::byte* send = in_place ? recv : send_buffer().data();
          std::memset(recv, 0xa5, count * 4);
          if (rank == root) expected::fill(send, count, DataType::kInt32, ReduceOp::kSum, root, 0);
          BroadcastOptions o;
          o.root = root;
          o.algorithm = algorithm;
          const std::string what =
              absl::StrCat(describe(algorithm, DataType::kInt32, ReduceOp::kSum, count, in_place),
                           " root=", root);
          ASSERT_TRUE(g_world->broadcast(send, recv, count, DataType::kInt32, o).ok()) << what;
          EXPECT_EQ(expected::count_wrong_copied(recv, count, DataType::kInt32, ReduceOp::kSum,
                                                 root, 0), 0u)
              << what;
        }
      }
    }
  }
}

// Every reduce_scatter algorithm forced by name gives exact results, in place and out of
// place; 1000003 elements per rank do not fit the relay, so recursive doubling and halving
// take their ring fallback there (halving at two ranks needs no relay). The halving needs a
// power-of-two rank count and is refused elsewhere, without failing the communicator.
TEST(Collectives, EveryReduceScatterAlgorithm) {
  const int rank = g_world->rank(), n = g_world->size();
  const bool power_of_two = (n & (n - 1)) == 0;
  for (const char* algorithm : {"ring", "recursive_doubling", "recursive_halving"}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      for (size_t count : {size_t{1}, size_t{3}, size_t{1009}, size_t{1000003}}) {
        for (bool in_place : {false, true}) {
          std::byte* send = send_buffer().data();
          expected::fill(send, count * n, DataType::kFloat32, op, rank, 0);
          std::byte* recv = in_place ? send + rank * count * 4 : recv_buffer().data();
          if (!in_place) std::memset(recv, 0xa5, count * 4);
          ReduceScatterOptions o;
          o.op = op;
          o.algorithm = algorithm;
          absl::Status s = g_world->reduce_scatter(send, recv, count, DataType::kFloat32, o);
          const std::string what =
              std::string(algorithm) + " " + describe("reduce_scatter", DataType::kFloat32, op, count, in_place);
          if (std::string(algorithm) == "recursive_halving" && !power_of_two) {
            EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
            continue;
          }
          ASSERT_TRUE(s.ok()) << what << ": " << s;
          EXPECT_EQ(expected::count_wrong_reduced(recv, count, DataType::kFloat32, op, n, rank * count), 0u)
              << what;
        }
      }
    }
  }
  ASSERT_TRUE(g_world->barrier().ok()) << "a refused algorithm must not fail the communicator";
}

// Calls on streams between ranks of one host go GPU to GPU through the cuda_ipc windows: the
// host links carry only the call checks, a few dozen bytes a piece. With WEFT_CUDA_IPC=off
// the data crosses them.
TEST(Collectives, CallsOnStreamsTakeTheirPath) {
  if (sweep_stream() == nullptr) GTEST_SKIP() << "calls on streams only (COLLECTIVES_ON_STREAM)";
  auto host_bytes = [] {
    uint64_t sent = 0;
    for (const LinkStats& link : g_world->link_stats()) sent += link.bytes_sent;
    return sent;
  };
  const size_t count = 4 * kMiB / 4;
  std::byte* send = send_buffer().data();
  std::byte* recv = recv_buffer().data();
  expected::fill(send, count, DataType::kFloat32, ReduceOp::kSum, g_world->rank(), 0);
  const uint64_t before = host_bytes();
  ASSERT_TRUE(finished(g_world->allreduce(send, recv, count, DataType::kFloat32,
                                          on_stream(AllreduceOptions{})))
                  .ok());
  const uint64_t moved = host_bytes() - before;
  EXPECT_EQ(expected::count_wrong_reduced(recv, count, DataType::kFloat32, ReduceOp::kSum,
                                          g_world->size(), 0), 0u);
  if (env_value(env::kCudaIpc) == "off") {
    EXPECT_GE(moved, count * 4 / 2) << "the data should cross the host links";
  } else {
    EXPECT_LT(moved, 64u << 10) << "the data should go through the cuda_ipc windows";
  }
}

// When WEFT_TRANSPORT forces a transport, every link must really use it.
TEST(Collectives, ForcedTransportIsUsed) {
  const std::string forced = env_value(env::kTransport);
  ASSERT_TRUE(g_world->barrier().ok());
  for (const LinkStats& link : g_world->link_stats()) {
    if (forced != "auto") {
      EXPECT_EQ(link.transport, forced) << "link to rank " << link.peer;
    }
    EXPECT_EQ(link.errors, 0u);
  }
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// Counts past 2^31 elements: byte counts are size_t end to end. 2 GiB + 3 bytes per buffer,
// so only the 2-rank run does it (the machine has 24 GiB).
TEST(Collectives, CountBeyondTwoToThe31) {
  if (g_world->size() != 2) GTEST_SKIP() << "runs in the 2-rank job only";
  const size_t count = (size_t{1} << 31) + 3;
  std::vector<std::byte> send(count), recv(count);
  expected::fill(send.data(), count, DataType::kUint8, ReduceOp::kSum, g_world->rank(), 0);
  absl::Status s = g_world->allreduce(send.data(), recv.data(), count, DataType::kUint8);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(expected::count_wrong_reduced(recv.data(), count, DataType::kUint8, ReduceOp::kSum,
                                          2, 0), 0u);
  BroadcastOptions o;
  o.root = 1;
  s = g_world->broadcast(send.data(), send.data(), count, DataType::kUint8, o);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(expected::count_wrong_copied(send.data(), count, DataType::kUint8, ReduceOp::kSum, 1, 0), 0u);
}

}  // namespace
}  // namespace weft
