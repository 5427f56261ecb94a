"""Thin, bounded wrappers over ip, tc and iptables, always aimed at one namespace."""

import json
import os
import re
import shlex
import shutil
import subprocess


class CommandError(RuntimeError):
    pass


def run(cmd, check=True, timeout=30):
    """Runs cmd (a list); returns its stdout. Every call is bounded by `timeout` seconds."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CommandError(f"{shlex.join(cmd)}: no answer within {timeout}s") from None
    if check and p.returncode != 0:
        raise CommandError(f"{shlex.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def ok(cmd, timeout=30):
    """Runs cmd and says whether it succeeded (for undo steps that may find nothing to undo)."""
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def require_tools(*tools):
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise CommandError(f"missing {', '.join(missing)}: run scripts/setup (as root)")


# --- namespaces ---------------------------------------------------------------------------

def netns_list():
    out = run(["ip", "-j", "netns", "list"], check=False) or "[]"
    return [entry["name"] for entry in json.loads(out)]


def netns_inode(ns):
    try:
        return os.stat(f"/run/netns/{ns}").st_ino
    except OSError:
        return None


def ip(ns, *args, check=True):
    return run(["ip", "-n", ns, *args], check=check)


def in_ns(ns, cmd):
    """cmd run inside namespace ns (with its /etc/netns/<ns>/hosts)."""
    return ["ip", "netns", "exec", ns, *cmd]


# --- links --------------------------------------------------------------------------------

def links(ns):
    """{ifname: {"state": operstate, "flags": [...]}} of namespace ns."""
    out = ip(ns, "-j", "link", "show", check=False) or "[]"
    return {l["ifname"]: {"state": l.get("operstate", "?"), "flags": l.get("flags", [])}
            for l in json.loads(out)}


def link_state(ns, ifname):
    """'up', 'no-carrier' (the far end is down: a pulled cable), 'down' or 'missing'."""
    info = links(ns).get(ifname)
    if info is None:
        return "missing"
    if "UP" not in info["flags"]:
        return "down"
    return "up" if "LOWER_UP" in info["flags"] else "no-carrier"


# --- shaping (tbf) ------------------------------------------------------------------------

_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
          "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def parse_rate(text):
    """'2gbit' -> 2e9 bits per second (tc's units: bit kbit mbit gbit, bps kbps mbps gbps)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]+)", text.strip().lower())
    if not m or m.group(2) not in _UNITS or float(m.group(1)) <= 0:
        raise ValueError(f"rate {text!r}: write a number and a unit, e.g. 2gbit, 500mbit, 100mbps")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def format_rate(bits):
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale:
            return f"{bits / scale:g}{unit}"
    return f"{bits}bit"


def set_rate(ns, ifname, bits):
    """Limits what leaves ifname to `bits` per second (None: no limit). The bucket holds 5 ms
    of traffic and at least 128 KiB, so a 64 KiB GSO packet always fits."""
    if bits is None:
        ok(["tc", "-n", ns, "qdisc", "del", "dev", ifname, "root"])
        return
    burst = max(bits // 8 // 200, 128 * 1024)
    run(["tc", "-n", ns, "qdisc", "replace", "dev", ifname, "root", "tbf",
         "rate", f"{bits}bit", "burst", str(burst), "latency", "25ms"])


def get_rate(ns, ifname):
    """The tbf rate on ifname in bits per second, or None."""
    out = run(["tc", "-n", ns, "-j", "qdisc", "show", "dev", ifname], check=False) or "[]"
    for q in json.loads(out):
        if q.get("kind") == "tbf" and q.get("root"):
            return int(q["options"]["rate"]) * 8   # tc -j reports bytes per second
    return None


# --- iptables -----------------------------------------------------------------------------

def iptables(ns, *args, check=True):
    return run(["ip", "netns", "exec", ns, "iptables", "-w", "5", *args], check=check)


def rules_tagged(ns, chain, tag):
    """The -A lines of chain whose comment is tag, as argument lists."""
    out = iptables(ns, "-S", chain, check=False)
    return [shlex.split(line) for line in out.splitlines()
            if line.startswith("-A ") and f'--comment {tag}' in line.replace('"', "")]


def tagged_counts(ns, chain, tag):
    """(packets seen, packets dropped) by the rules of chain tagged tag: a fault puts a
    counting rule (no target) before its DROP rules."""
    seen = dropped = 0
    out = iptables(ns, "-v", "-S", chain, check=False)
    for line in out.splitlines():
        words = shlex.split(line)
        if words[:1] != ["-A"] or tag not in words or "-c" not in words:
            continue
        packets = int(words[words.index("-c") + 1])
        if "DROP" in words:
            dropped += packets
        else:
            seen += packets
    return seen, dropped


def delete_tagged(ns, chain, tag):
    for rule in rules_tagged(ns, chain, tag):
        iptables(ns, "-D", *rule[1:], check=False)
