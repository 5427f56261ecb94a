#include "src/launch_env.hpp"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace weft {
namespace {

// One launcher's variables. Optional ones are nullptr when the launcher has none.
struct Source {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

// In precedence order. Slurm's local size needs parsing, so it is handled separately.
constexpr Source kWeft{"weft", env::kRank.name, env::kSize.name, nullptr, nullptr};
constexpr Source kOpenMpi{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr Source kSlurm{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};
constexpr Source kPmi{"mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};

// An empty variable counts as unset: `WEFT_RANK= mpirun ...` should not shadow mpirun's.
std::optional<std::string> get(const EnvLookup& lookup, const char* name) {
  if (name == nullptr) return std::nullopt;
  auto v = lookup(name);
  if (!v || v->empty()) return std::nullopt;
  return v;
}

// Digits only: no sign, no spaces, no suffix. Launchers never write anything else, so
// anything else is a typo or a mangled environment and must not become rank 0 silently.
bool parse_digits(std::string_view s, int64_t& out) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

absl::StatusOr<int> parse_count(const char* name, const std::string& value, int64_t max) {
  int64_t v = 0;
  if (!parse_digits(value, v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, " is not a non-negative integer; fix or unset it"));
  }
  if (v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, " is larger than the limit of ", max));
  }
  return static_cast<int>(v);
}

// Parses Slurm's per-node task counts, e.g. "4(x2),3": nodes 0-1 run 4 tasks, node 2 runs 3.
// Returns this node's count, or -1 when the counts differ and SLURM_NODEID is unknown.
absl::StatusOr<int> parse_tasks_per_node(const char* name, const std::string& value,
                                         std::optional<int> node_id) {
  std::vector<std::pair<int, int>> runs;  // (tasks, nodes)
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    std::string count(item), repeat = "1";
    if (const size_t open = count.find("(x"); open != std::string::npos) {
      if (count.back() != ')') count.clear();  // forces the error below
      else {
        repeat = count.substr(open + 2, count.size() - open - 3);
        count.resize(open);
      }
    }
    int64_t tasks = 0, nodes = 0;
    if (!parse_digits(count, tasks) || !parse_digits(repeat, nodes) || tasks <= 0 ||
        nodes <= 0 || tasks > kMaxLaunchSize || nodes > kMaxLaunchSize) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "=", value, " is not a Slurm task count list like \"4(x2),3\"; unset it"));
    }
    runs.emplace_back(static_cast<int>(tasks), static_cast<int>(nodes));
  }
  bool uniform = true;
  for (const auto& r : runs) uniform = uniform && r.first == runs.front().first;
  if (uniform) return runs.front().first;
  if (!node_id) return -1;
  int64_t node = *node_id;
  for (const auto& [tasks, nodes] : runs) {
    if (node < nodes) return tasks;
    node -= nodes;
  }
  return absl::InvalidArgumentError(absl::StrCat("SLURM_NODEID=", *node_id, " is beyond the ",
                                                 "nodes listed in ", name, "=", value));
}

// Reads one source. nullopt: the source is absent (neither rank nor size set).
absl::StatusOr<std::optional<LaunchInfo>> read_source(const Source& src,
                                                      const EnvLookup& lookup) {
  const auto rank_s = get(lookup, src.rank);
  const auto size_s = get(lookup, src.size);
  if (!rank_s && !size_s) return std::optional<LaunchInfo>();
  if (!rank_s || !size_s) {
    const char* set = rank_s ? src.rank : src.size;
    const char* unset = rank_s ? src.size : src.rank;
    return absl::InvalidArgumentError(absl::StrCat(set, "=", rank_s ? *rank_s : *size_s,
                                                   " is set but ", unset,
                                                   " is not; set both or neither"));
  }
  LaunchInfo info;
  info.launcher = src.launcher;
  auto size = parse_count(src.size, *size_s, kMaxLaunchSize);
  if (!size.ok()) return size.status();
  if (*size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(src.size, "=0: a job needs at least one rank"));
  }
  auto rank = parse_count(src.rank, *rank_s, kMaxLaunchSize);
  if (!rank.ok()) return rank.status();
  if (*rank >= *size) {
    return absl::InvalidArgumentError(absl::StrCat(src.rank, "=", *rank, " is not below ",
                                                   src.size, "=", *size,
                                                   "; ranks are numbered 0 to size-1"));
  }
  info.rank = *rank;
  info.size = *size;
  if (auto s = get(lookup, src.local_size)) {
    auto v = parse_count(src.local_size, *s, info.size);
    if (!v.ok()) return v.status();
    if (*v == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(src.local_size, "=0, yet this process runs on this host"));
    }
    info.local_size = *v;
  }
  if (auto s = get(lookup, src.local_rank)) {
    auto v = parse_count(src.local_rank, *s, info.size - 1);
    if (!v.ok()) return v.status();
    info.local_rank = *v;
  }
  return std::optional<LaunchInfo>(std::move(info));
}

absl::Status read_slurm_local_size(const EnvLookup& lookup, LaunchInfo& info) {
  std::optional<int> node_id;
  if (auto s = get(lookup, "SLURM_NODEID")) {
    auto v = parse_count("SLURM_NODEID", *s, kMaxLaunchSize);
    if (!v.ok()) return v.status();
    node_id = *v;
  }
  // The step's layout first: inside an allocation, srun may run fewer tasks than the job.
  for (const char* name :
       {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (auto s = get(lookup, name)) {
      auto v = parse_tasks_per_node(name, *s, node_id);
      if (!v.ok()) return v.status();
      info.local_size = *v;
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LaunchInfo> read_launch_info(const EnvLookup& lookup) {
  std::optional<LaunchInfo> found;
  for (const Source* src : {&kWeft, &kOpenMpi, &kSlurm, &kPmi}) {
    auto r = read_source(*src, lookup);
    if (!r.ok()) return r.status();
    if (!*r) continue;
    found = std::move(**r);
    if (src == &kSlurm) {
      if (auto st = read_slurm_local_size(lookup, *found); !st.ok()) return st;
    }
    break;
  }
  if (!found) {
    return absl::FailedPreconditionError(
        "no launcher environment found (WEFT_RANK/WEFT_SIZE, OMPI_COMM_WORLD_*, SLURM_PROCID/"
        "SLURM_NTASKS, PMI_RANK/PMI_SIZE): start the job with mpirun or srun, or set "
        "WEFT_RANK, WEFT_SIZE and WEFT_COORDINATOR=host:port on every process");
  }
  LaunchInfo info = std::move(*found);
  const char* local_rank_name = "the launcher's local rank";
  if (auto s = get(lookup, env::kLocalRank.name)) {
    auto v = parse_count(env::kLocalRank.name, *s, info.size - 1);
    if (!v.ok()) return v.status();
    info.local_rank = *v;
    local_rank_name = env::kLocalRank.name;
  }
  if (info.local_size > info.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the launcher says ", info.local_size, " ranks run on this node but ", info.size,
        " in the whole job; check the launcher's per-node task counts (",
        info.launcher, ")"));
  }
  if (info.local_size > 0 && info.local_rank >= info.local_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        local_rank_name, " (", info.local_rank, ") is not below the launcher's local size (",
        info.local_size, "); check WEFT_LOCAL_RANK and the launcher's per-node task counts"));
  }
  info.coordinator = env_value(env::kCoordinator, lookup);
  return info;
}

bool launcher_puts_every_rank_here(int size, const EnvLookup& lookup) {
  auto launch = read_launch_info(lookup);
  if (!launch.ok() || launch->local_size != launch->size) return false;
  return size == 0 ? launch->size > 1 : launch->size == size;
}

std::string listen_ifname(const std::string& socket_ifname, bool every_rank_here) {
  if (!socket_ifname.empty()) return socket_ifname;
  return every_rank_here ? "lo" : "";
}

}  // namespace weft
