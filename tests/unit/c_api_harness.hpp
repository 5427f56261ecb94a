// What the C API tests share: ranks as threads of this process, joined through the C API
// itself, and their last error messages.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/scoped_env.hpp"
#include "weft/weft.h"

namespace weft::testing {

// C API tests run on loopback only.
inline const auto* const kLoopbackEnv = ::testing::AddGlobalTestEnvironment(new LoopbackEnv);

inline std::string last_error(weftComm_t comm) { return weftGetLastError(comm); }

// n ranks as threads; empty (after a test failure) if any rank could not join.
inline std::vector<weftComm_t> init_comms(int n) {
  weftUniqueId id;
  EXPECT_EQ(weftGetUniqueId(&id), weftSuccess) << last_error(nullptr);
  std::vector<weftComm_t> comms(n, nullptr);
  std::vector<weftResult_t> results(n, weftInternalError);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] = weftCommInitRank(&comms[r], n, id, r);
      errors[r] = last_error(nullptr);  // thread-local: read it on this thread
    });
  }
  for (auto& t : threads) t.join();
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(results[r], weftSuccess) << "rank " << r << ": " << errors[r];
    ok &= results[r] == weftSuccess;
  }
  if (!ok) {
    for (weftComm_t c : comms) weftCommDestroy(c);
    return {};
  }
  return comms;
}

inline void destroy(const std::vector<weftComm_t>& comms) {
  for (weftComm_t c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

template <typename Fn>
void on_every_rank(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

}  // namespace weft::testing
