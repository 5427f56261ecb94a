// The suite of collectives on device buffers through the host fallback (src/staging.hpp),
// written once: tests/unit/staging_test.cc runs it on host memory with the stand-in copier
// (WEFT_DEVICE_STAND_IN), tests/gpu/staged_collectives_test.cc on a GPU's memory with CUDA's.
//
// Ranks are threads of this process, joined through the C API. Every collective, a float, a
// 16-bit float, an integer and a double type, sizes from 0 to several pieces (the caller
// sets WEFT_STAGING_BYTES small), in and out of place, results checked exactly: inputs are
// small integers whose sums every type holds. Inputs are written through the memory's own
// queue just before the call, so a call that did not wait for it reads stale data.
//
// `Memory` gives each rank its buffers: Memory() on the rank's thread, alloc(bytes),
// fill(at, byte, bytes), put(at, host bytes, bytes), get(host, at, bytes) (waits), stream().
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/half.hpp"
#include "tests/unit/c_api_harness.hpp"
#include "weft/types.hpp"

namespace weft::testing {

// Element `i` of rank `r`'s input.
inline double staged_input(int r, size_t i) {
  return static_cast<double>((r + 1) * static_cast<int>(i % 7 + 1));
}

inline std::vector<std::byte> staged_values(DataType type, size_t count, auto value_of) {
  std::vector<std::byte> v(count * size_of(type));
  for (size_t i = 0; i < count; ++i) {
    std::byte* at = v.data() + i * size_of(type);
    const double x = value_of(i);
    if (type == DataType::kInt32) {
      const int32_t y = static_cast<int32_t>(x);
      std::memcpy(at, &y, 4);
    } else if (type == DataType::kFloat32) {
      const float y = static_cast<float>(x);
      std::memcpy(at, &y, 4);
    } else if (type == DataType::kBFloat16) {
      const uint16_t y = float_to_bf16(static_cast<float>(x));
      std::memcpy(at, &y, 2);
    } else {
      std::memcpy(at, &x, 8);
    }
  }
  return v;
}

template <class Memory>
void run_staged_suite(int n) {
  std::vector<weftComm_t> comms = init_comms(n);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  on_every_rank(n, [&](int r) {
    Memory memory;
    for (CollectiveKind kind : {CollectiveKind::kAllreduce, CollectiveKind::kAllgather,
                                CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast}) {
      for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt32, DataType::kFloat64}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1009}, size_t{100003}}) {
          for (bool in_place : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "rank " << r << " of " << n << ": " << name_of(kind)
                                              << " " << name_of(type) << " count " << count
                                              << (in_place ? " in place" : ""));
            const size_t e = size_of(type);
            const bool gathers = kind == CollectiveKind::kAllgather;
            const bool scatters = kind == CollectiveKind::kReduceScatter;
            const size_t send_count = scatters ? count * n : count;
            const size_t recv_count = gathers ? count * n : count;
            const size_t recv_bytes = std::max(send_count, recv_count) * e;
            std::byte* send = memory.alloc(send_count * e);
            std::byte* recv = memory.alloc(recv_bytes);
            // In place as NCCL has it: allgather's input is this rank's block of recv,
            // reduce_scatter's output is this rank's block of its input.
            std::byte* in = in_place ? (gathers ? recv + r * count * e : recv) : send;
            std::byte* out = in_place && scatters ? recv + r * count * e : recv;
            const auto host_in = staged_values(type, send_count, [&](size_t i) { return staged_input(r, i); });
            memory.fill(recv, 0xff, recv_bytes);
            memory.put(in, host_in.data(), host_in.size());
            const auto t = static_cast<weftDataType_t>(type);
            const int root = n - 1;
            weftResult_t result;
            switch (kind) {
              case CollectiveKind::kAllreduce:
                result = weftAllReduce(in, out, count, t, weftSum, comms[r], memory.stream());
                break;
              case CollectiveKind::kAllgather:
                result = weftAllGather(in, out, count, t, comms[r], memory.stream());
                break;
              case CollectiveKind::kReduceScatter:
                result = weftReduceScatter(in, out, count, t, weftSum, comms[r], memory.stream());
                break;
              default:
                result = weftBroadcast(in, out, count, t, root, comms[r], memory.stream());
                break;
            }
            ASSERT_EQ(result, weftSuccess) << last_error(comms[r]);
            std::vector<std::byte> got(recv_count * e);
            memory.get(got.data(), out, got.size());
            const auto want = staged_values(type, recv_count, [&](size_t i) {
              double sum = 0;
              switch (kind) {
                case CollectiveKind::kAllreduce:
                  for (int q = 0; q < n; ++q) sum += staged_input(q, i);
                  return sum;
                case CollectiveKind::kAllgather:
                  return staged_input(static_cast<int>(i / count), i % count);
                case CollectiveKind::kReduceScatter:
                  for (int q = 0; q < n; ++q) sum += staged_input(q, r * count + i);
                  return sum;
                default:
                  return staged_input(root, i);
              }
            });
            if (!want.empty()) {
              ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
            }
          }
        }
      }
    }
  });
  destroy(comms);
}

}  // namespace weft::testing
