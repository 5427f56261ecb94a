#include "src/health/change_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "src/health/json.hpp"

namespace weft::health {

absl::StatusOr<std::unique_ptr<ChangeLog>> ChangeLog::open(const std::string& setting, int rank) {
  if (setting == "off") return std::unique_ptr<ChangeLog>(new ChangeLog(-1, false, rank));
  if (setting == "stderr" || setting.empty()) {
    return std::unique_ptr<ChangeLog>(new ChangeLog(STDERR_FILENO, false, rank));
  }
  const std::string path = absl::StrReplaceAll(setting, {{"%r", absl::StrCat(rank)}});
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WEFT_HEALTH_LOG=", setting, ": cannot open ", path, " for appending (",
        std::strerror(errno), "); give a writable path, stderr or off"));
  }
  return std::unique_ptr<ChangeLog>(new ChangeLog(fd, true, rank));
}

ChangeLog::~ChangeLog() {
  if (owned_) ::close(fd_);
}

void ChangeLog::write(const Change& change) {
  if (fd_ < 0) return;
  const std::string line = change_json_line(rank_, change) + "\n";
  // A short write to a full disk or a closed pipe loses this line, never the job.
  [[maybe_unused]] const ssize_t n = ::write(fd_, line.data(), line.size());
}

}  // namespace weft::health
