// What the bootstrap tests share: ranks as threads of this process that rendezvous through
// a unique id, the peer info each publishes, and the full table each must get back. Every
// wait has a deadline of a few seconds.
#pragma once

#include "src/bootstrap.hpp"
#include "src/base/peer_info.hpp"
#include "src/bootstrap_wire.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/unit/free_port.hpp"
#include "transport/tcp/address.hpp"
#include "transport/tcp/rails.hpp"

namespace weft::bootstrap_test {

// The job secret of every rendezvous and id in these tests.
inline const JobSecret kSecret = fresh_secret();

inline PeerInfo peer(int r) {
  PeerInfo p;
  p.pid = 1000 + r;
  p.host_id = absl::StrCat("host-", r % 3);
  p.addresses = {{"tcp", absl::StrCat("10.0.0.", r, ":1234")}, {"shm", absl::StrCat("/w", r)}};
  return p;
}

// A port nothing listens on right now, clear of the ports the kernel hands out.
inline uint16_t free_port() { return weft::testing::free_loopback_port(); }

using Result = absl::StatusOr<std::vector<PeerInfo>>;

// Runs `ranks` (rank, size) pairs as threads against `id`, each after its delay.
inline std::vector<Result> run_ranks(const UniqueId& id, const std::vector<std::pair<int, int>>& ranks,
                              absl::Duration deadline,
                              const std::vector<absl::Duration>& delays = {}) {
  std::vector<Result> results(ranks.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      if (i < delays.size()) absl::SleepFor(delays[i]);
      auto [rank, size] = ranks[i];
      results[i] = bootstrap_exchange(id, rank, size, peer(rank), Deadline::after(deadline));
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

inline void expect_full_table(const Result& r, int size) {
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(static_cast<int>(r->size()), size);
  for (int i = 0; i < size; ++i) {
    PeerInfo want = peer(i);
    want.rank = i;
    EXPECT_EQ((*r)[i].encode(), want.encode()) << "slot " << i;
  }
}

inline std::vector<std::pair<int, int>> all_ranks(int size) {
  std::vector<std::pair<int, int>> v;
  for (int r = 0; r < size; ++r) v.emplace_back(r, size);
  return v;
}

}  // namespace weft::bootstrap_test
