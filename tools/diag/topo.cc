#include "tools/diag/topo.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/comm.hpp"
#include "transport/transport.hpp"

namespace weft::tools::diag {
namespace {

double counter(const LinkHealth& h, const std::string& name, double otherwise) {
  for (const HealthCounter& c : h.counters) {
    if (c.name == name) return c.value;
  }
  return otherwise;
}

// An interface's speed in Mbit/s from sysfs, or -1 where the kernel does not know (veth).
int interface_mbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int mbps = -1;
  if (!(f >> mbps) || mbps <= 0) return -1;
  return mbps;
}

// The GB/s one rail of a pair should carry: the slower end's port or interface.
double rail_GBps(const nlohmann::json& a, const nlohmann::json& b, int rail) {
  auto speed = [rail](const nlohmann::json& r) {
    for (const auto& p : r["ib_ports"]) {
      if (p.value("rail", -1) == rail && p.value("rate_gbps", 0.0) > 0) return p["rate_gbps"].get<double>() / 8;
    }
    for (const auto& x : r["rails"]) {
      if (x.value("rail", -1) == rail && x.value("mbps", -1) > 0) return x["mbps"].get<int>() / 8000.0;
    }
    return -1.0;
  };
  const double sa = speed(a), sb = speed(b);
  return sa > 0 && sb > 0 ? std::min(sa, sb) : -1;
}

}  // namespace

absl::StatusOr<nlohmann::json> describe_rank(Communicator& communicator) {
  detail::Comm& comm = communicator.impl();
  const int me = comm.rank();
  const PeerInfo& self = comm.topology().peers()[me];
  nlohmann::json j = {{"rank", me},
                      {"host", self.host_id.substr(0, self.host_id.find('/'))},
                      {"local_rank", comm.topology().local_rank()}};
  // The links: transport and rails, from the link itself (its own thread: with_links).
  nlohmann::json links = nlohmann::json::array();
  std::set<std::string> rail_names;
  std::vector<std::string> rail_order;
  absl::Status s = comm.with_links([&](LinkProvider& provider) -> absl::Status {
    for (int peer = 0; peer < comm.size(); ++peer) {
      if (peer == me) continue;
      auto pair = provider.link(peer, Deadline::after(comm.config().timeout));
      if (!pair.ok()) return pair.status();
      const std::vector<std::string> rails = (*pair)->rail_names();
      links.push_back({{"peer", peer},
                       {"transport", std::string(comm.topology().transport_to(peer)->name())},
                       {"rails", rails}});
      if (rails.size() > rail_order.size()) rail_order = rails;
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  j["links"] = std::move(links);
  nlohmann::json rails = nlohmann::json::array();
  for (size_t r = 0; r < rail_order.size(); ++r) {
    rails.push_back({{"rail", r}, {"ifname", rail_order[r]}, {"mbps", interface_mbps(rail_order[r])}});
  }
  j["rails"] = std::move(rails);
  nlohmann::json gpus = nlohmann::json::array(), ib = nlohmann::json::array();
  std::map<int, nlohmann::json> nvlinks;  // by GPU
  for (const LinkHealth& h : communicator.health()) {
    const HealthScope& sc = h.scope;
    if (sc.kind == "gpu") {
      gpus.push_back({{"gpu", sc.gpu}, {"bus_id", sc.device}});
    } else if (sc.kind == "nvlink") {
      nvlinks[sc.gpu].push_back({{"link", sc.link}, {"to_rank", sc.peer}, {"to_bus_id", sc.device},
                                 {"up", counter(h, "nvlink_down", 0) == 0}});
    } else if (sc.kind == "ib_port") {
      ib.push_back({{"device", sc.device},
                    {"port", sc.link},
                    {"rail", sc.rail},
                    {"state", counter(h, "ib_port_down", 0) == 0 ? "ACTIVE" : "DOWN"},
                    {"width", counter(h, "ib_width", 0)},
                    {"rate_gbps", counter(h, "ib_rate_gbps", 0)},
                    {"degraded", counter(h, "ib_degraded", 0) != 0}});
    }
  }
  for (auto& g : gpus) {
    g["nvlinks"] = nvlinks.count(g["gpu"]) ? nvlinks[g["gpu"]] : nlohmann::json::array();
  }
  j["gpus"] = std::move(gpus);
  j["ib_ports"] = std::move(ib);
  // Which memory UCX moves itself (CUDA memory straight, GPUDirect RDMA), or why no ucx.
  j["ucx"] = transport::ucx_description();
  return j;
}

nlohmann::json topo_json(const std::vector<nlohmann::json>& ranks) {
  nlohmann::json pairs = nlohmann::json::array();
  for (const nlohmann::json& a : ranks) {
    for (const nlohmann::json& l : a["links"]) {
      const int peer = l["peer"];
      if (peer < a["rank"].get<int>() || peer >= static_cast<int>(ranks.size())) continue;
      const nlohmann::json& b = ranks[peer];
      nlohmann::json p = {{"ranks", {a["rank"], peer}}, {"transport", l["transport"]},
                          {"rails", l["rails"]}};
      if (l["transport"] == "tcp") {
        double total = 0;
        bool known = !l["rails"].empty();
        for (size_t r = 0; r < l["rails"].size(); ++r) {
          const double gbps = rail_GBps(a, b, static_cast<int>(r));
          known &= gbps > 0;
          total += gbps;
        }
        p["expected_GBps"] = known ? nlohmann::json(total) : nlohmann::json();
        p["path"] = absl::StrCat("tcp over ", absl::StrJoin(l["rails"].get<std::vector<std::string>>(), ", "));
      } else {
        // shm, or ucx: a memory copy on one host (the host's speed, not a link's); between
        // hosts UCX picks the device itself.
        p["expected_GBps"] = nullptr;
        p["path"] = absl::StrCat(l["transport"].get<std::string>(),
                                 a["host"] == b["host"] ? " (same host)" : " (between hosts)");
      }
      pairs.push_back(std::move(p));
    }
  }
  return {{"schema", "weft.diag.topo/1"}, {"ranks", ranks}, {"pairs", std::move(pairs)}};
}

bool topo_degraded(const nlohmann::json& topo) {
  for (const nlohmann::json& r : topo["ranks"]) {
    for (const auto& p : r["ib_ports"]) {
      if (p["state"] != "ACTIVE" || p["degraded"].get<bool>()) return true;
    }
    for (const auto& g : r["gpus"]) {
      for (const auto& l : g["nvlinks"]) {
        if (!l["up"].get<bool>()) return true;
      }
    }
  }
  return false;
}

std::string topo_table(const nlohmann::json& topo) {
  std::string out = "# ranks\nrank  host              local  gpus  ib ports  rails\n";
  for (const nlohmann::json& r : topo["ranks"]) {
    std::vector<std::string> rails;
    for (const auto& x : r["rails"]) {
      rails.push_back(absl::StrCat(x["ifname"].get<std::string>(),
                                   x["mbps"].get<int>() > 0 ? absl::StrCat(" ", x["mbps"].get<int>(), " Mb/s") : ""));
    }
    absl::StrAppendFormat(&out, "%-5d %-17s %-6d %-5d %-9d %s\n", r["rank"].get<int>(),
                          r["host"].get<std::string>(), r["local_rank"].get<int>(),
                          r["gpus"].size(), r["ib_ports"].size(), absl::StrJoin(rails, ", "));
  }
  out += "# GPUs and NVLinks\nrank  gpu  bus id             nvlinks (link: far end, state)\n";
  for (const nlohmann::json& r : topo["ranks"]) {
    for (const auto& g : r["gpus"]) {
      std::vector<std::string> links;
      for (const auto& l : g["nvlinks"]) {
        links.push_back(absl::StrCat(l["link"].get<int>(), ": ", l["to_bus_id"].get<std::string>(),
                                     l["to_rank"].get<int>() >= 0
                                         ? absl::StrCat(" (rank ", l["to_rank"].get<int>(), ")")
                                         : "",
                                     l["up"].get<bool>() ? " up" : " DOWN"));
      }
      absl::StrAppendFormat(&out, "%-5d %-4d %-18s %s\n", r["rank"].get<int>(), g["gpu"].get<int>(),
                            g["bus_id"].get<std::string>(), absl::StrJoin(links, "; "));
    }
  }
  out += "# InfiniBand ports\nrank  device    port  rail  state   width  Gb/s\n";
  for (const nlohmann::json& r : topo["ranks"]) {
    for (const auto& p : r["ib_ports"]) {
      absl::StrAppendFormat(&out, "%-5d %-9s %-5d %-5s %-7s %-6s %g%s\n", r["rank"].get<int>(),
                            p["device"].get<std::string>(), p["port"].get<int>(),
                            p["rail"].get<int>() < 0 ? "-" : absl::StrCat(p["rail"].get<int>()),
                            p["state"].get<std::string>(),
                            absl::StrCat(p["width"].get<double>(), "x"), p["rate_gbps"].get<double>(),
                            p["degraded"].get<bool>() ? "  DEGRADED (below its best)" : "");
    }
  }
  out += "# ucx: the memory each rank's UCX moves itself\n";
  for (const nlohmann::json& r : topo["ranks"]) {
    absl::StrAppendFormat(&out, "%-5d %s\n", r["rank"].get<int>(), r.value("ucx", std::string("-")));
  }
  out += "# pairs: the path weft uses and what it should carry\npair    path                            expected GB/s\n";
  for (const nlohmann::json& p : topo["pairs"]) {
    absl::StrAppendFormat(&out, "%-7s %-31s %s\n",
                          absl::StrCat(p["ranks"][0].get<int>(), "-", p["ranks"][1].get<int>()),
                          p["path"].get<std::string>(),
                          p["expected_GBps"].is_null()
                              ? (p["transport"] == "tcp" ? "? (interface speed unknown)" : "-")
                              : absl::StrFormat("%.3g", p["expected_GBps"].get<double>()));
  }
  absl::StrAppend(&out, topo_degraded(topo) ? "# verdict: degraded (a port or NVLink down or below its best)\n"
                                            : "# verdict: healthy, every port and NVLink up\n");
  return out;
}

}  // namespace weft::tools::diag
