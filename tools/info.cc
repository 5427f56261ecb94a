// `weft info`: what this build has and every setting it reads.
#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/algorithm.hpp"
#include "collectives/reduce.hpp"
#include "src/base/env.hpp"
#include "src/device/device.hpp"
#include "src/health/policy.hpp"
#include "src/launch_env.hpp"
#include "tools/peer.hpp"
#include "transport/tcp/rails.hpp"
#include "transport/transport.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"

namespace weft::tools {
namespace {

// Where this process's ranks would listen: the rendezvous (rank 0), the tcp data links and
// shrink's control plane all take the same interfaces (src/launch_env.hpp: listen_ifname).
void print_listening() {
  const std::string ifname = env_value(env::kSocketIfname);
  const bool one_host = launcher_puts_every_rank_here(0);
  auto rails = transport::tcp::choose_rails(listen_ifname(ifname, one_host));
  std::printf("tcp listens on: ");
  if (!rails.ok()) {
    std::printf("nothing usable: %s\n", std::string(rails.status().message()).c_str());
    return;
  }
  for (size_t i = 0; i < rails->size(); ++i) {
    std::printf("%s%s %s", i ? ", " : "", (*rails)[i].ifname.c_str(), (*rails)[i].addr.ip().c_str());
  }
  if (!ifname.empty()) {
    std::printf(" (WEFT_SOCKET_IFNAME)\n");
  } else if (one_host) {
    std::printf(" (the launcher put every rank on this host: loopback alone)\n");
  } else {
    std::printf(" (the default interface; a job whose ranks all share this host, by its launcher's\n"
                "                word or a rendezvous on loopback, listens on loopback alone)\n");
  }
}

// The health policy in force with this environment: every rule, its thresholds and where
// they come from (src/health/policy.cc), or why the settings are refused.
void print_health_policy() {
  std::printf("\nhealth policy");
  const auto config = Config::from_env();
  if (!config.ok()) {
    std::printf(": not in force, a setting is refused: %s\n",
                std::string(config.status().message()).c_str());
    return;
  }
  if (!config->health) {
    std::printf(": off (WEFT_HEALTH=off)\n");
    return;
  }
  const auto policy = health::Policy::from_config(*config);
  if (!policy.ok()) {
    std::printf(": not in force: %s\n", std::string(policy.status().message()).c_str());
    return;
  }
  std::printf(" (counter, measure, SUSPECT, FAILING, window, anchor), read every %g ms: ",
              absl::ToDoubleMilliseconds(config->health_interval));
  const std::vector<std::string> lines = policy->describe();
  for (size_t i = 0; i < lines.size(); ++i) std::printf("%s%s\n", i ? "  " : "", lines[i].c_str());
}

}  // namespace

int info_command(int argc, char** argv) {
  CLI::App app("", "weft info");
  if (auto rc = parse_args(app, argc, argv,
                           "usage: weft info\n\nPrints the build, transports, algorithms and "
                           "every WEFT_* variable with its default and current value. Needs no "
                           "job.\n")) {
    return *rc;
  }
  warn_about_unknown_env();
  std::printf("weft %s\n", WEFT_VERSION);
  std::printf("reduction kernels: %s\n", reduce_isa());
  std::printf("cuda: %s\n", device::describe().c_str());
  std::printf("nccl (for weft bench --compare nccl): %s\n", describe_nccl().c_str());
  std::printf("transports: shm (same host), tcp (any host), ucx (any host)\n");
  std::printf("ucx: %s\n", transport::ucx_description().c_str());
  print_listening();
  std::printf("\n");
  std::printf("algorithms (first of each collective is its default):\n");
  for (const Algorithm& a : all_algorithms()) {
    std::printf("  %-15s %-19s %s\n", name_of(a.kind), a.name, a.description);
  }
  print_health_policy();
  std::printf("\nenvironment:\n");
  std::printf("  %-25s %-10s %-12s %s\n", "variable", "default", "current", "meaning");
  for (const EnvVar* v : all_env_vars()) {
    const auto current = read_env(v->name);
    std::printf("  %-25s %-10s %-12s %s", v->name, *v->default_value ? v->default_value : "-",
                current ? current->c_str() : "(unset)", v->help);
    if (v->max_bytes > 0) {
      std::printf(" [%llu..%llu bytes]", static_cast<unsigned long long>(v->min_bytes),
                  static_cast<unsigned long long>(v->max_bytes));
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace weft::tools
