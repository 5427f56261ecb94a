// Where ranks that meet through WEFT_COORDINATOR get their secret: never from the address.
// Each test works in a fresh temporary folder through a substituted environment.
#include "src/coordinator_secret.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "src/unique_id.hpp"

namespace weft {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class CoordinatorSecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/weft-secret-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    env_["HOME"] = dir_;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  EnvLookup lookup() const {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }
  std::string dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(CoordinatorSecretTest, TheFileIsMadeRandomPrivateAndThenKept) {
  auto first = coordinator_secret(lookup());
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string path = dir_ + "/.weft/job_secret";
  EXPECT_EQ(first->source, path);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = coordinator_secret(lookup());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(first->secret, again->secret);
  // Another user's home holds another secret: nothing about it follows from the address.
  env_["HOME"] = dir_ + "/other";
  std::filesystem::create_directory(dir_ + "/other");
  auto other = coordinator_secret(lookup());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(first->secret, other->secret);
}

TEST_F(CoordinatorSecretTest, AFileOthersMayReadIsRefused) {
  const std::string path = dir_ + "/secret";
  std::ofstream(path) << "0123456789abcdef0123456789abcdef\n";
  ::chmod(path.c_str(), 0644);
  env_["WEFT_JOB_SECRET_FILE"] = path;
  auto s = coordinator_secret(lookup());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              AllOf(HasSubstr("WEFT_JOB_SECRET_FILE=" + path), HasSubstr("mode 0644"),
                    HasSubstr("chmod 600")));
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(coordinator_secret(lookup()).ok());
  std::ofstream(path) << "short\n";
  auto short_one = coordinator_secret(lookup());
  ASSERT_FALSE(short_one.ok());
  EXPECT_THAT(std::string(short_one.status().message()), HasSubstr("5 characters"));
}

TEST_F(CoordinatorSecretTest, WeftJobSecretThenTheLaunchersKeyComeFirst) {
  env_["OMPI_MCA_orte_precondition_transports"] = "0f1e2d3c4b5a6978-8796a5b4c3d2e1f0";
  auto launcher = coordinator_secret(lookup());
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  EXPECT_EQ(launcher->source, "mpirun's job key");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.weft/job_secret"));
  env_["WEFT_JOB_SECRET"] = "a shared secret of some length";
  auto given = coordinator_secret(lookup());
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->source, "WEFT_JOB_SECRET");
  EXPECT_EQ(given->secret, *secret_from_text("a shared secret of some length"));
  EXPECT_NE(given->secret, launcher->secret);
}

// The hole this closes: the id's secret used to be a hash of "host:port", so anyone who knew
// the address could compute it.
TEST_F(CoordinatorSecretTest, TheIdsSecretIsNotAFunctionOfTheAddress) {
  auto a = unique_id_for_coordinator("127.0.0.1:29500", lookup());
  env_["HOME"] = dir_ + "/other";
  std::filesystem::create_directory(dir_ + "/other");
  auto b = unique_id_for_coordinator("127.0.0.1:29500", lookup());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(decode_unique_id(*a)->job_id, decode_unique_id(*b)->job_id);
  EXPECT_NE(decode_unique_id(*a)->secret, decode_unique_id(*b)->secret);
}

}  // namespace
}  // namespace weft
