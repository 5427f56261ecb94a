// Environment helpers for unit tests that build real communicators in one process.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "src/env.hpp"

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
