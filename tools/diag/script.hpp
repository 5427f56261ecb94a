// The helper scripts the weft command runs (plots), found beside the binary: the source
// tree's scripts/ from a build tree, share/weft/ from an installed prefix.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace weft::tools {

/// The path of helper script `name`, or an error that says where it was looked for.
absl::StatusOr<std::string> find_script(const std::string& name);

/// Runs script `name` with `args`; an error says how it failed.
absl::Status run_script(const std::string& name, const std::vector<std::string>& args);

}  // namespace weft::tools
