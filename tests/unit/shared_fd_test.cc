// How a window's descriptor reaches a peer process (src/device/shared_fd.hpp): the owner
// hands it over a Unix socket to a process that names it with the handle's token, and to
// nobody else; every refusal and every absent owner is a clear error, at once.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "src/device/shared_fd.hpp"

namespace weft::device {
namespace {

using ::testing::HasSubstr;

// A memfd holding `text`.
int memfd_with(const char* text) {
  const int fd = memfd_create("shared-fd-test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text, std::strlen(text)), static_cast<ssize_t>(std::strlen(text)));
  return fd;
}

std::string contents(int fd) {
  char buf[64] = {};
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The handle goes to a child process through a pipe, as it goes to a peer rank over the
// job's links; the child takes the descriptor and reads what the parent wrote.
TEST(SharedFd, AnotherProcessTakesAnOfferedDescriptor) {
  int handle_pipe[2];
  ASSERT_EQ(pipe(handle_pipe), 0);
  // Forked before the post's thread exists, so the child is a plain single-threaded copy.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(handle_pipe[1]);
    char handle[256] = {};
    size_t got = 0;
    ssize_t n = 0;
    while (got < sizeof handle - 1 && (n = read(handle_pipe[0], handle + got, sizeof handle - 1 - got)) > 0) {
      got += static_cast<size_t>(n);
    }
    absl::StatusOr<int> fd = take_fd(handle);
    _exit(fd.ok() && contents(*fd) == "window of the parent" ? 0 : 1);
  }
  close(handle_pipe[0]);
  const int fd = memfd_with("window of the parent");
  FdPost post;
  const std::string handle = fd_handle(fd);
  const bool sent = write(handle_pipe[1], handle.data(), handle.size()) ==
                    static_cast<ssize_t>(handle.size());
  close(handle_pipe[1]);  // also when the write failed: the child must not wait for more
  ASSERT_TRUE(sent);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // the child's take is bounded (10 s)
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not take " << handle;
  forget_fd(fd);
  close(fd);
}

TEST(SharedFd, AWrongTokenOrAForgottenDescriptorGetsNothing) {
  const int fd = memfd_with("secret");
  FdPost post;
  const std::string handle = fd_handle(fd);
  absl::StatusOr<int> taken = take_fd(handle);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(contents(*taken), "secret");
  close(*taken);
  std::string wrong = handle;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  taken = take_fd(wrong);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(taken.status().message(), HasSubstr("offers no descriptor"));
  forget_fd(fd);
  taken = take_fd(handle);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kPermissionDenied) << "a forgotten descriptor";
  close(fd);
}

TEST(SharedFd, AnOwnerWithoutAPostIsAClearErrorAtOnce) {
  const int fd = memfd_with("nobody serves this");
  const std::string handle = fd_handle(fd);  // no FdPost alive
  absl::StatusOr<int> taken = take_fd(handle);
  EXPECT_FALSE(taken.ok());
  EXPECT_THAT(taken.status().message(), HasSubstr("WEFT_CUDA_IPC=off"));
  forget_fd(fd);
  close(fd);
}

// A child forked while a post is up neither serves nor keeps the name: once the parent's post
// goes, a new one comes up and serves.
TEST(SharedFd, AChildForkedWhilePostingLeavesTheNameToTheParent) {
  const int fd = memfd_with("after the fork");
  pid_t child = -1;
  {
    FdPost post;
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      sleep(3);  // alive, holding whatever it inherited, while the parent posts again
      _exit(0);
    }
  }
  FdPost again;
  const std::string handle = fd_handle(fd);
  absl::StatusOr<int> taken = take_fd(handle);
  EXPECT_TRUE(taken.ok()) << taken.status();
  if (taken.ok()) close(*taken);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  forget_fd(fd);
  close(fd);
}

TEST(SharedFd, AMalformedHandleIsRefused) {
  const std::string nonce = "00112233445566778899aabbccddeeff", token = nonce;
  const std::string good = "weft-fds-1-" + nonce + ":2:" + token;
  ASSERT_TRUE(take_fd(good).status().code() != absl::StatusCode::kInvalidArgument) << good;
  for (const std::string& bad :
       {std::string(""), std::string("1234:7"), "weft-fds-1:2:" + token,  // no nonce
        "weft-fds-1x-" + nonce + ":2:" + token, "weft-fds-1-" + nonce + ":2x:" + token,
        "weft-fds-1-" + nonce + ":2:" + token + "0", "weft-fds-1-" + nonce + ":2:" + token.substr(1) + "g",
        "weft-fds-1-" + nonce.substr(2) + ":2:" + token, "weft-fds-1-" + nonce + "::" + token}) {
    absl::StatusOr<int> taken = take_fd(bad);
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace weft::device
