// `weft health`: what a running job is doing about its links, from every rank's health
// endpoint (WEFT_HEALTH_ENDPOINT): states, the route epoch, isolated links with their reasons
// and times, route changes and their cost, and counters. --watch refreshes in place.
#include <dirent.h>

#include <csignal>
#include <fstream>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "src/base/env.hpp"
#include "src/health/json.hpp"
#include "tools/cli.hpp"
#include "tools/commands.hpp"
#include "tools/health/fetch.hpp"
#include "tools/health/view.hpp"

namespace weft::tools {
namespace {

using health::Endpoint;

constexpr int kCannotRun = 2;

struct Flags {
  int port = 0;
  int per_host = 1;
  int local = 0;
  std::string netns;
  std::string vcluster;
  std::string hostfile;
  bool json = false;
  bool watch = false;
  double interval_s = 1;
  int count = 0;
};

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// The virtual cluster's hosts: network namespaces weft-NAME-hI, in host order.
std::vector<std::string> vcluster_hosts(const std::string& name) {
  std::vector<std::pair<int, std::string>> found;
  const std::regex host("weft-" + name + "-h([0-9]+)");
  if (DIR* d = opendir("/var/run/netns")) {
    while (dirent* e = readdir(d)) {
      std::cmatch m;
      if (std::regex_match(e->d_name, m, host)) found.emplace_back(std::stoi(m[1]), e->d_name);
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [i, ns] : found) out.push_back(ns);
  return out;
}

// An mpirun hostfile ("node7 slots=4", # comments): each host's endpoints, port + k for each
// of its slots (--per-host where it gives none).
absl::StatusOr<std::vector<Endpoint>> hostfile_endpoints(const Flags& f) {
  std::ifstream in(f.hostfile);
  if (!in) return absl::NotFoundError("cannot read the hostfile " + f.hostfile);
  std::vector<Endpoint> out;
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    std::vector<std::string> words = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.empty()) continue;
    int slots = f.per_host;
    for (size_t w = 1; w < words.size(); ++w) {
      if (absl::StartsWith(words[w], "slots=") && !absl::SimpleAtoi(words[w].substr(6), &slots)) {
        return absl::InvalidArgumentError("hostfile " + f.hostfile + ": bad " + words[w]);
      }
    }
    for (int k = 0; k < slots; ++k) {
      Endpoint e;
      e.host = words[0];
      e.port = f.port + k;
      out.push_back(e);
    }
  }
  return out;
}

std::vector<Endpoint> endpoints(const Flags& f) {
  std::vector<std::string> hosts;
  if (!f.vcluster.empty()) hosts = vcluster_hosts(f.vcluster);
  if (!f.netns.empty()) hosts = absl::StrSplit(f.netns, ',', absl::SkipEmpty());
  std::vector<Endpoint> out;
  for (const std::string& ns : hosts) {
    for (int k = 0; k < f.per_host; ++k) out.push_back({ns, f.port + k});
  }
  for (int k = 0; k < f.local; ++k) out.push_back({"", f.port + k});
  return out;
}

nlohmann::json read_job(const std::vector<Endpoint>& targets) {
  std::vector<health::RankView> views;
  for (const Endpoint& e : targets) {
    health::RankView v;
    v.endpoint = e.name();
    auto h = health::http_get(e, "/health", absl::Seconds(2));
    if (!h.ok()) {
      v.error = std::string(h.status().message());
    } else {
      v.health = nlohmann::json::parse(*h, nullptr, false);
      if (v.health.is_discarded()) {
        v.health = nullptr;
        v.error = "/health is not JSON: is this a weft endpoint?";
      }
      auto r = health::http_get(e, "/route", absl::Seconds(2));
      if (r.ok()) {
        v.route = nlohmann::json::parse(*r, nullptr, false);
        if (v.route.is_discarded()) v.route = nullptr;
      }
    }
    views.push_back(std::move(v));
  }
  return health::job_json(views, weft::health::iso_time(absl::Now()));
}

}  // namespace

int health_command(int argc, char** argv) {
  CLI::App app("What a running job is doing about its links: every rank's health endpoint "
               "read and shown as one job.",
               "weft health");
  Flags f;
  if (const auto base = read_env(env::kHealthEndpoint.name)) f.port = std::atoi(base->c_str());
  app.add_option("-p,--port", f.port,
                 "the job's WEFT_HEALTH_ENDPOINT: each rank serves on it plus its local rank")
      ->check(CLI::Range(1, 65535));
  app.add_option("--local", f.local, "read N ranks on this host (ports PORT .. PORT+N-1)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--vcluster", f.vcluster,
                 "read the virtual cluster NAME's hosts (docs/CLUSTER.md), each from inside it");
  app.add_option("--netns", f.netns, "read hosts that are these network namespaces (comma list)");
  app.add_option("--hostfile", f.hostfile,
                 "read the hosts of an mpirun hostfile (host slots=N); their endpoints must "
                 "listen where this host reaches them (WEFT_HEALTH_ENDPOINT_ADDRESS)");
  app.add_option("--per-host", f.per_host, "ranks per host (mpirun's slots)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_flag("--json", f.json, "print JSON (schema weft.health/1) instead of the table");
  app.add_flag("-w,--watch", f.watch, "refresh in place until interrupted (or --count)");
  app.add_option("-i,--interval", f.interval_s, "seconds between refreshes with --watch")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("-n,--count", f.count, "with --watch: stop after N refreshes")
      ->check(CLI::Range(1, 1000000));
  app.footer(
      "Endpoints listen on each host's loopback unless WEFT_HEALTH_ENDPOINT_ADDRESS says\n"
      "otherwise (docs/HEALTH.md): read the ranks of this host with --local N, a virtual\n"
      "cluster's hosts with --vcluster NAME (as root), other hosts with --hostfile FILE.\n"
      "  WEFT_HEALTH_ENDPOINT=9400 mpirun -np 4 -x WEFT_HEALTH_ENDPOINT weft bench ... &\n"
      "  weft health --port 9400 --local 4 --watch\n"
      "  weft health --vcluster vc --port 9400 --json\n"
      "Exit status: 0 every scope HEALTHY, 1 one is not (SUSPECT, FAILING, ISOLATED,\n"
      "PROBATION), 2 an endpoint did not answer or bad usage.");
  if (auto rc = parse_args(app, argc, argv)) return *rc;
  if (f.port <= 0) {
    std::fprintf(stderr, "weft health: which port? --port PORT (the job's WEFT_HEALTH_ENDPOINT)\n");
    return kCannotRun;
  }
  std::vector<Endpoint> targets = endpoints(f);
  if (!f.hostfile.empty()) {
    auto more = hostfile_endpoints(f);
    if (!more.ok()) {
      std::fprintf(stderr, "weft health: %s\n", std::string(more.status().message()).c_str());
      return kCannotRun;
    }
    targets.insert(targets.end(), more->begin(), more->end());
  }
  if (targets.empty()) {
    std::fprintf(stderr, "weft health: no endpoints: name them with --local N, --vcluster NAME "
                         "(is it up?) or --netns NS,...\n");
    return kCannotRun;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  int rc = kCannotRun;
  for (int n = 1; !g_stop; ++n) {
    const nlohmann::json job = read_job(targets);
    rc = health::job_status(job);
    if (f.watch && !f.json) std::fputs("\033[H\033[2J", stdout);  // redraw in place
    std::fputs(f.json ? (job.dump(f.watch ? -1 : 2) + "\n").c_str() : health::job_table(job).c_str(),
               stdout);
    std::fflush(stdout);
    if (!f.watch || (f.count > 0 && n >= f.count)) break;
    for (absl::Time until = absl::Now() + absl::Seconds(f.interval_s); !g_stop && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  return rc;
}

}  // namespace weft::tools
