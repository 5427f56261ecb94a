"""vcluster status: hosts, their links as the kernel sees them now, their fake devices
(with every counter that is not zero) and active faults (counter storms included)."""

import json

from . import devices
from . import names as nm
from . import net
from . import procs


def gather(names, state):
    """Everything status shows, as one JSON-ready dict (also what programs read to find
    the rails: per host, each rail's interface, address and subnet)."""
    info = state.info()
    if info is None:
        return {"cluster": names.cluster, "up": False}
    out = {"cluster": names.cluster, "up": bool(info.get("complete")),
           "state_dir": state.dir, "hosts": [], "rails": info["rails"],
           "slots": info["slots"], "head": {"namespace": names.head_ns,
                                            "address": nm.head_addr()},
           "switch_namespace": names.switch_ns,
           "hostfile": state.path("hostfile"), "agent": state.path("agent"),
           "rails_env": state.path("rails.env"),
           "rail_ifnames": [nm.rail_if(k) for k in range(info["rails"])],
           "rail_subnets": [nm.rail_subnet(k) for k in range(info["rails"])],
           "mgmt": {"ifname": nm.MGMT_IF, "subnet": nm.mgmt_subnet()}}
    present = set(net.netns_list())
    for i in range(info["hosts"]):
        h = nm.host_name(i)
        ns = names.host_ns(h)
        host = {"name": h, "namespace": ns, "present": ns in present,
                "mgmt": {"ifname": nm.MGMT_IF, "address": nm.mgmt_addr(i)}, "rails": []}
        for k in range(info["rails"]):
            rail = {"rail": k, "ifname": nm.rail_if(k), "address": nm.rail_addr(i, k),
                    "subnet": nm.rail_subnet(k), "switch_port": nm.switch_port(i, k)}
            if host["present"]:
                rail["state"] = net.link_state(ns, nm.rail_if(k))
                rate = net.get_rate(ns, nm.rail_if(k))
                rail["rate"] = net.format_rate(rate) if rate else None
            shaped = info.get("shapes", {}).get(f"{h}/{k}")
            rail["shape"] = net.format_rate(shaped) if shaped else None
            host["rails"].append(rail)
        if devices.has_devices(info) and info.get("complete"):
            host["fake"] = devices.summary(state, info, h)
        out["hosts"].append(host)
    out["faults"] = []
    for f in state.faults():
        shown = {k: v for k, v in f.items() if k not in ("rules",)}
        if f.get("pid"):
            shown["background_alive"] = procs.alive(f["pid"], f.get("pid_start"))
        if f["kind"] in ("loss", "partition", "flap"):
            counts = [net.tagged_counts(names.host_ns(h), nm.FAULT_CHAIN, f["id"])
                      for h in f["hosts"]]
            shown["packets_seen"] = sum(c[0] for c in counts)
            shown["packets_dropped"] = sum(c[1] for c in counts)
        out["faults"].append(shown)
    return out


STORMS = ("ecc-storm", "nvlink-storm", "ib-errors")


def show(names, state, as_json):
    s = gather(names, state)
    if as_json:
        print(json.dumps(s, indent=1))
        return
    if not s["up"]:
        made = " (partly made: run down)" if "hosts" in s else ""
        print(f"cluster {names.cluster}: not up{made}")
        return
    print(f"cluster {names.cluster}: {len(s['hosts'])} hosts x {s['rails']} rail(s), "
          f"{s['slots']} slot(s) per host; state {s['state_dir']}")
    print(f"  head {s['head']['namespace']} {s['head']['address']} (mpirun runs here)")
    print(f"  {'host':<5} {'namespace':<16} {'mgmt':<15} {'rail':<4} {'ifname':<8} "
          f"{'address':<15} {'link':<10} {'rate':<10} shape")
    for h in s["hosts"]:
        for r in h["rails"]:
            first = r["rail"] == 0
            print(f"  {h['name'] if first else '':<5} "
                  f"{(h['namespace'] if h['present'] else 'MISSING') if first else '':<16} "
                  f"{h['mgmt']['address'] if first else '':<15} {r['rail']:<4} "
                  f"{r['ifname']:<8} {r['address']:<15} {r.get('state', '?'):<10} "
                  f"{r.get('rate') or '-':<10} {r['shape'] or '-'}")
    fake = [h for h in s["hosts"] if "fake" in h]
    if fake:
        print(f"  fake devices ({devices.root(state)}/hI: WEFT_FAKE_NVML_STATE=nvml.json, "
              "WEFT_IB_SYSFS_ROOT=sys):")
        for h in fake:
            storms = [f["id"] for f in s["faults"]
                      if f["kind"] in STORMS and h["name"] in f.get("hosts", [])
                      and f.get("background_alive")]
            more = f"; storms: {' '.join(storms)}" if storms else ""
            print(f"    {h['name']:<5} {devices.summary_line(h['fake'])}{more}")
    if not s["faults"]:
        print("  faults: none")
        return
    print("  faults:")
    for f in s["faults"]:
        extra = ""
        if "background_alive" in f:
            extra = f" [pid {f['pid']} {'running' if f['background_alive'] else 'gone'}]"
        if f.get("packets_seen"):
            extra += (f" [dropped {f['packets_dropped']} of {f['packets_seen']} packets, "
                      f"{100 * f['packets_dropped'] / f['packets_seen']:.2f}%]")
        print(f"    {f['id']:<22} {f['desc']} (since {f['since']}){extra}")
