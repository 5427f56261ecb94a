#include "src/coordinator_secret.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft {
namespace {

// The key Open MPI's mpirun makes per job and hands every rank.
constexpr const char* kOpenMpiJobKey = "OMPI_MCA_orte_precondition_transports";

absl::Status file_error(const std::string& path, const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "WEFT_JOB_SECRET_FILE=", path, " ", what,
      "; fix it, point WEFT_JOB_SECRET_FILE elsewhere, or set WEFT_JOB_SECRET on every rank"));
}

// Reads the secret from an existing file, which must be this user's alone.
absl::StatusOr<JobSecret> read_secret_file(const std::string& path) {
  // A link is fine (to a shared file system, say): what it leads to must be this user's
  // alone, which fstat checks on the file itself.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return file_error(path, absl::StrCat("cannot be read: ", std::strerror(errno)));
  struct stat st{};
  char buf[256];
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      (st.st_mode & 077) == 0) {
    do {
      n = ::read(fd, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
  }
  const int read_errno = errno;
  ::close(fd);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    return file_error(path, "is not a regular file of this user");
  }
  if ((st.st_mode & 077) != 0) {
    return file_error(path, absl::StrFormat("can be read by others (mode %04o): chmod 600 it, and "
                                            "make a new secret if others may have read it",
                                            st.st_mode & 07777));
  }
  if (n < 0) return file_error(path, absl::StrCat("cannot be read: ", std::strerror(read_errno)));
  const std::string text(absl::StripAsciiWhitespace(absl::string_view(buf, n)));
  if (text.size() < kShortestGoodSecret) {
    return file_error(path, absl::StrCat("holds ", text.size(), " characters, fewer than ",
                                         kShortestGoodSecret, " (delete it to make a new one)"));
  }
  return secret_from_text(text);
}

// Makes the file with a random secret unless it exists. Written aside and linked into place,
// so ranks starting together never read half a file, and the first one's secret wins.
absl::Status make_secret_file(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return file_error(path, absl::StrCat("cannot be made: mkdir ", dir, ": ", std::strerror(errno)));
    }
  }
  const JobSecret random = fresh_secret();
  std::string text;
  for (uint8_t b : random) absl::StrAppendFormat(&text, "%02x", b);
  text += '\n';
  // Unique across the hosts that share a home: pids alone repeat (containers).
  const JobSecret tag = fresh_secret();
  const std::string aside = absl::StrFormat("%s.%02x%02x%02x%02x%02x%02x%02x%02x.new", path, tag[0],
                                            tag[1], tag[2], tag[3], tag[4], tag[5], tag[6], tag[7]);
  const int fd = ::open(aside.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return file_error(path, absl::StrCat("cannot be made: ", std::strerror(errno)));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  const int linked = written ? ::link(aside.c_str(), path.c_str()) : -1;
  const int err = errno;
  ::unlink(aside.c_str());
  if (!written) return file_error(path, "cannot be written");
  // EEXIST: another rank made it first, and its secret is the job's.
  if (linked != 0 && err != EEXIST && ::access(path.c_str(), F_OK) != 0) {
    return file_error(path, absl::StrCat("cannot be made: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string secret_file_path(const EnvLookup& lookup) {
  std::string path = env_value(env::kJobSecretFile, lookup);
  if (path.empty() || path[0] != '~') return path;
  std::string home = lookup("HOME").value_or("");
  if (home.empty()) {
    if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr) home = pw->pw_dir;
  }
  return home + path.substr(1);
}

absl::StatusOr<CoordinatorSecret> coordinator_secret(const EnvLookup& lookup) {
  CoordinatorSecret out;
  if (const std::string text = env_value(env::kJobSecret, lookup); !text.empty()) {
    auto secret = secret_from_text(text);
    if (!secret.ok()) return secret.status();
    return CoordinatorSecret{*secret, "WEFT_JOB_SECRET"};
  }
  if (const auto key = lookup(kOpenMpiJobKey); key && key->size() >= kShortestGoodSecret) {
    auto secret = secret_from_text(*key);
    if (!secret.ok()) return secret.status();
    return CoordinatorSecret{*secret, "mpirun's job key"};
  }
  const std::string path = secret_file_path(lookup);
  if (::access(path.c_str(), F_OK) != 0) {
    if (absl::Status made = make_secret_file(path); !made.ok()) return made;
  }
  auto secret = read_secret_file(path);
  if (!secret.ok()) return secret.status();
  return CoordinatorSecret{*secret, path};
}

}  // namespace weft
