// Environment helpers for unit tests that build real communicators in one process.
#pragma once

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/base/env.hpp"
#include "weft/weft.hpp"

namespace weft::testing {

/// Sets (or, with nullptr, unsets) an environment variable for one scope and restores what
/// was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name), old_(read_env(name)) {
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

using Comms = std::vector<std::unique_ptr<Communicator>>;

/// An n-rank communicator whose ranks are threads of this process; empty (after a test
/// failure) if any rank could not be created.
inline Comms make_comms(int n) {
  auto id = make_unique_id();
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return {};
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> created(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { created[r] = Communicator::create(*id, r, n); });
  }
  for (auto& t : threads) t.join();
  Comms comms;
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(created[r].ok()) << "rank " << r << ": " << created[r].status();
    if (!created[r].ok()) return {};
    comms.push_back(*std::move(created[r]));
  }
  return comms;
}

/// Rendezvous and tcp on loopback, and no wait longer than 10 s, for a whole test binary:
/// `const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new LoopbackEnv);`
class LoopbackEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("WEFT_SOCKET_IFNAME", "lo", 1);
    setenv("WEFT_TIMEOUT", "10", 1);
  }
};

}  // namespace weft::testing
