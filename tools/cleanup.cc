// weft cleanup: removes shared-memory rings a crashed job left behind in /dev/shm.
#include <cstdio>
#include <cstring>
#include <string>

#include "nlohmann/json.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"
#include "transport/shm/stale.hpp"

namespace weft::tools {
namespace {

constexpr char kUsage[] =
    "usage: weft cleanup [--dry-run] [--json]\n"
    "\n"
    "Lists weft's shared-memory rings in /dev/shm and removes the stale ones: rings whose\n"
    "creating process no longer runs (a job killed before both ends of a ring attached).\n"
    "Rings of running jobs, and segments it cannot read (another weft version, another\n"
    "container's pid namespace), are left alone. Every new communicator does the same\n"
    "quietly, so this is for tidying up by hand or from a job script.\n"
    "\n"
    "  --dry-run   only list; remove nothing\n"
    "  --json      one JSON object per segment instead of the table\n"
    "  -h, --help  this text\n";

}  // namespace

int cleanup_command(int argc, char** argv) {
  bool dry_run = false, json = false;
  CLI::App app("", "weft cleanup");
  app.add_flag("--dry-run", dry_run);
  app.add_flag("--json", json);
  if (auto rc = parse_args(app, argc, argv, kUsage)) return *rc;
  auto segments = transport::shm::sweep_stale_rings(dry_run);
  if (!segments.ok()) {
    std::fprintf(stderr, "weft cleanup: %s\n", std::string(segments.status().message()).c_str());
    return 1;
  }
  int stale = 0, removed = 0, failed = 0;
  if (!json) std::printf("%-48s %12s %8s  %s\n", "# segment (/dev/shm)", "bytes", "creator", "state");
  for (const auto& s : *segments) {
    stale += s.state == "stale" || s.state == "abandoned";
    removed += s.removed;
    failed += (s.state == "stale" || s.state == "abandoned") && !dry_run && !s.removed;
    const char* action = s.removed ? "removed" : ((s.state == "stale" || s.state == "abandoned") && !dry_run ? "NOT removed" : "");
    if (json) {
      const nlohmann::ordered_json j = {{"segment", s.name}, {"bytes", s.bytes},
                                        {"creator_pid", s.creator_pid}, {"state", s.state},
                                        {"removed", s.removed}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%-48s %12lld %8d  %s %s\n", s.name.c_str(), s.bytes, s.creator_pid,
                  s.state.c_str(), action);
    }
  }
  if (!json) {
    std::printf("# %zu weft segment(s), %d stale, %d removed%s\n", segments->size(), stale, removed,
                dry_run ? " (dry run)" : "");
  }
  if (failed > 0) {
    std::fprintf(stderr, "weft cleanup: %d stale segment(s) could not be removed (permissions? "
                 "run as the user that owns them)\n", failed);
    return 1;
  }
  return 0;
}

}  // namespace weft::tools
