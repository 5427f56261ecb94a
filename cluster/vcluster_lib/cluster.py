"""Bringing a cluster up and down, and changing its links (shape, rail up/down).

Layout for `up N --rails R` (names in names.py):

  namespace weft-<c>-sw     bridges br-mgmt, br-r0 .. br-r(R-1); ports hIm, hIr0 ..
  namespace weft-<c>-head   weft-mgmt 198.19.255.254     (mpirun runs here)
  namespace weft-<c>-hI     weft-mgmt 198.19.255.(I+1), weft-rK 198.18.K.(I+1)/24,
                            iptables chain WEFT-FAULTS (jumped to from INPUT)
  /etc/netns/weft-<c>-*/hosts   names for `ip netns exec` (h1, h1-r1, h1-mgmt, head)
  <state>/fake/hI/          host I's fake GPUs (nvml.json) and InfiniBand ports (sys/),
                            one mlx5_K per rail K (devices.py)

Both ends of every veth are created inside the namespaces, so the root namespace never
holds one; deleting the namespaces deletes every link, qdisc and rule with them."""

import os
import shutil
import time

from . import devices
from . import launch
from . import names as nm
from . import net
from . import procs


class ClusterError(RuntimeError):
    pass


def load(state, need_up=True):
    info = state.info()
    if need_up and (info is None or not info.get("complete")):
        raise ClusterError(f"cluster {state.name!r} is not up: run cluster/vcluster up N")
    return info


def host_namespaces(names, info):
    return {nm.host_name(i): names.host_ns(nm.host_name(i)) for i in range(info["hosts"])}


def check_host(info, host):
    i = nm.host_index(host)
    if i >= info["hosts"]:
        raise ClusterError(f"no host {host}: the cluster has h0..h{info['hosts'] - 1}")
    return i


def check_rail(info, rail):
    if rail is not None and not 0 <= rail < info["rails"]:
        raise ClusterError(f"no rail {rail}: hosts have rails 0..{info['rails'] - 1}")


# --- up -----------------------------------------------------------------------------------

def up(names, state, hosts, rails, slots, replace=False, gpus=2):
    net.require_tools("ip", "tc", "iptables", "unshare")
    if (not 1 <= hosts <= nm.MAX_HOSTS or not 1 <= rails <= nm.MAX_RAILS or slots < 1
            or not 0 <= gpus <= devices.MAX_GPUS):
        raise ClusterError(f"up: 1..{nm.MAX_HOSTS} hosts, 1..{nm.MAX_RAILS} rails, slots >= 1, "
                           f"0..{devices.MAX_GPUS} GPUs")
    with state.lock():
        info = state.info()
        if info and info.get("complete") and not replace:
            shape = (info["hosts"], info["rails"], info["slots"], info.get("gpus"))
            if shape == (hosts, rails, slots, gpus):
                print(f"vcluster: cluster {names.cluster} is already up with {hosts} hosts")
                return
            fake = (f"{info['gpus']} GPUs" if devices.has_devices(info)
                    else "no fake devices")
            raise ClusterError(f"cluster {names.cluster} is up with {info['hosts']} hosts, "
                               f"{info['rails']} rails, {info['slots']} slots and {fake}: "
                               "run down first, or up --replace")
        if info or _leftovers(names):
            _down_locked(names, state, quiet=True)   # an interrupted up, or --replace
        info = {"cluster": names.cluster, "hosts": hosts, "rails": rails, "slots": slots,
                "gpus": gpus, "complete": False, "made": [], "shapes": {}}
        state.write("cluster.json", info)
        _make(names, state, info)
        info["complete"] = True
        info["up_since"] = time.strftime("%Y-%m-%d %H:%M:%S")
        state.write("cluster.json", info)
    print(f"vcluster: cluster {names.cluster} up: {hosts} hosts x {rails} rail(s), "
          f"{slots} slot(s), {gpus} fake GPU(s) each; state in {state.dir}")


def _make(names, state, info):
    hosts, rails = info["hosts"], info["rails"]
    host_list = [nm.host_name(i) for i in range(hosts)]
    sw = names.switch_ns
    if not os.path.isdir("/etc/netns"):
        state.record_made(info, "dir", "/etc/netns")
    for ns in [sw, names.head_ns] + [names.host_ns(h) for h in host_list]:
        state.record_made(info, "netns", ns)
        net.run(["ip", "netns", "add", ns])
        net.ip(ns, "link", "set", "lo", "up")
        etc = f"/etc/netns/{ns}"
        state.record_made(info, "dir", etc)
        os.makedirs(etc, exist_ok=True)
        with open(f"{etc}/hosts", "w") as f:
            f.write(launch.etc_hosts_text(hosts, rails))
    for bridge in [nm.MGMT_BRIDGE] + [nm.rail_bridge(k) for k in range(rails)]:
        net.ip(sw, "link", "add", bridge, "type", "bridge")
        net.ip(sw, "link", "set", bridge, "up")
    _veth(names.head_ns, nm.MGMT_IF, sw, "head", nm.MGMT_BRIDGE, f"{nm.head_addr()}/24")
    for i, h in enumerate(host_list):
        ns = names.host_ns(h)
        _veth(ns, nm.MGMT_IF, sw, nm.switch_port(i, None), nm.MGMT_BRIDGE,
              f"{nm.mgmt_addr(i)}/24")
        for k in range(rails):
            _veth(ns, nm.rail_if(k), sw, nm.switch_port(i, k), nm.rail_bridge(k),
                  f"{nm.rail_addr(i, k)}/24")
        net.iptables(ns, "-N", nm.FAULT_CHAIN)
        net.iptables(ns, "-I", "INPUT", "-j", nm.FAULT_CHAIN)
    state.write_text("hostfile", launch.hostfile_text(hosts, info["slots"]))
    state.write_text("agent", launch.agent_text(names, state, hosts), mode=0o755)
    state.write_text("rails.env", launch.rails_env_text(rails))
    devices.make(state, info)
    _wait_carrier(names, info)


def _veth(ns, ifname, sw, port, bridge, cidr):
    """One link: ifname in ns, its peer `port` in the switch namespace on `bridge`."""
    net.run(["ip", "link", "add", "name", ifname, "netns", ns, "type", "veth",
             "peer", "name", port, "netns", sw])
    net.ip(sw, "link", "set", port, "master", bridge, "up")
    net.ip(ns, "addr", "add", cidr, "dev", ifname)
    net.ip(ns, "link", "set", ifname, "up")


def _wait_carrier(names, info, timeout=10.0):
    end = time.monotonic() + timeout
    for h in host_namespaces(names, info).values():
        while net.link_state(h, nm.rail_if(0)) != "up":
            if time.monotonic() > end:
                raise ClusterError(f"{h}: {nm.rail_if(0)} has no carrier after {timeout}s")
            time.sleep(0.05)


# --- down ---------------------------------------------------------------------------------

def _leftovers(names):
    return [ns for ns in net.netns_list() if names.owns_ns(ns)]


def down(names, state):
    with state.lock():
        _down_locked(names, state, quiet=False)


def _down_locked(names, state, quiet):
    """Undoes everything, whatever `up` got to: faults (daemons stopped, ranks resumed),
    processes left in the hosts, namespaces (with their links, qdiscs and rules), the
    /etc/netns files, the fake devices and the state directory. Safe to repeat, and works
    on clusters made before fake devices existed (nothing of kind "fake" recorded)."""
    from . import faults   # faults needs this module; import here to avoid a cycle
    info = state.info() or {}
    faults.clear_all_locked(state)
    made = info.get("made", [])
    namespaces = {e["name"] for e in made if e["kind"] == "netns"} | set(_leftovers(names))
    namespaces = {ns for ns in namespaces if names.owns_ns(ns)}
    killed = procs.kill_all_in({ns: ns for ns in namespaces})
    for ns in sorted(namespaces):
        net.ok(["ip", "netns", "del", ns])
    dirs = {e["name"] for e in made if e["kind"] == "dir"}
    if os.path.isdir("/etc/netns"):
        dirs |= {f"/etc/netns/{d}" for d in os.listdir("/etc/netns") if names.owns_ns(d)}
    for d in sorted(dirs):
        if d.startswith(f"/etc/netns/{names.prefix}"):
            shutil.rmtree(d, ignore_errors=True)
    if "/etc/netns" in dirs:   # only if up made it, and only once no other cluster uses it
        _rmdir_if_empty("/etc/netns")
    for e in made:
        if e["kind"] == "fake":
            devices.remove(state, e["name"])
    state.remove()
    if not quiet:
        left = _leftovers(names)
        if left:
            raise ClusterError(f"down: namespaces still present: {', '.join(left)}")
        if not namespaces and not dirs:
            print(f"vcluster: cluster {names.cluster} is not up; nothing to remove")
            return
        extra = f", stopped {killed} process(es) left in the hosts" if killed else ""
        print(f"vcluster: cluster {names.cluster} down: removed {len(namespaces)} "
              f"namespace(s) and {len(dirs)} /etc/netns entr(ies){extra}")


def _rmdir_if_empty(path):
    try:
        os.rmdir(path)
    except OSError:
        pass


# --- links: shaping and rails -------------------------------------------------------------

def apply_rate(names, state, info, host_i, rail):
    """Sets the tbf on both ends of host_i's rail link to the lowest of its configured shape
    and any active degrade fault (no limit if neither)."""
    key = f"{nm.host_name(host_i)}/{rail}"
    limits = [info.get("shapes", {}).get(key)]
    limits += [f["rate"] for f in state.faults()
               if f["kind"] == "degrade" and key in f["links"]]
    limits = [x for x in limits if x]
    bits = min(limits) if limits else None
    net.set_rate(names.host_ns(nm.host_name(host_i)), nm.rail_if(rail), bits)
    net.set_rate(names.switch_ns, nm.switch_port(host_i, rail), bits)


def shape(names, state, host, rail, rate):
    """vcluster shape: a lasting rate limit (not a fault); rate None removes it."""
    with state.lock():
        info = load(state)
        i = check_host(info, host)
        check_rail(info, rail)
        rails = range(info["rails"]) if rail is None else [rail]
        for k in rails:
            key = f"{host}/{k}"
            if rate is None:
                info["shapes"].pop(key, None)
            else:
                info["shapes"][key] = net.parse_rate(rate)
        state.write("cluster.json", info)
        for k in rails:
            apply_rate(names, state, info, i, k)
    what = "no limit" if rate is None else rate
    print(f"vcluster: {host} rail(s) {','.join(map(str, rails))}: {what}")


def rail(names, state, host, k, updown):
    """Pulls (down) or plugs back (up) host's rail k: the switch port goes down, so the host
    sees its interface lose carrier, as when a NIC's link drops."""
    with state.lock():
        info = load(state)
        i = check_host(info, host)
        check_rail(info, k)
        net.ip(names.switch_ns, "link", "set", nm.switch_port(i, k), updown)
        state.log_event(f"rail {host} {k} {updown}")
    print(f"vcluster: {host} rail {k} ({nm.rail_if(k)}) {updown}")
