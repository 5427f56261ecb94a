#include "tools/diag/script.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::tools {

absl::StatusOr<std::string> find_script(const std::string& name) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot find this binary: ", ec.message()));
  // build/tools/weft -> scripts/; PREFIX/bin/weft -> PREFIX/share/weft/.
  const std::filesystem::path bin = exe.parent_path();
  const std::vector<std::filesystem::path> places = {bin / ".." / ".." / "scripts" / name,
                                                     bin / ".." / "share" / "weft" / name};
  for (const auto& p : places) {
    if (access(p.c_str(), X_OK) == 0) return std::filesystem::weakly_canonical(p).string();
  }
  std::vector<std::string> tried;
  for (const auto& p : places) tried.push_back(p.lexically_normal().string());
  return absl::NotFoundError(
      absl::StrCat(name, " not found (looked at ", absl::StrJoin(tried, ", "), ")"));
}

absl::Status run_script(const std::string& name, const std::vector<std::string>& args) {
  auto path = find_script(name);
  if (!path.ok()) return path.status();
  std::vector<char*> argv = {path->data()};
  std::vector<std::string> copies = args;
  for (std::string& a : copies) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return absl::InternalError("waitpid failed");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(*path, " failed (exit status ",
                                          WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                          "); is python3-matplotlib installed (scripts/setup)?"));
}

}  // namespace weft::tools
