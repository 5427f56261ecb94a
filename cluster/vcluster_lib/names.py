"""Every name and address a virtual cluster uses, derived from the cluster's name.

All namespaces start with ``weft-<cluster>-`` so cleanup can never touch anything else.
Links live only inside those namespaces (the root namespace gets no interface, route or
rule): each host has a management link (Open MPI's daemons talk over it, and no fault
touches it) and R rail links, one per rail bridge in the switch namespace. Inside every
host the interfaces have the same names, so one WEFT_SOCKET_IFNAME serves all ranks.
"""

import re

NAME_RE = re.compile(r"^[a-z0-9]{1,8}$")
DEFAULT_CLUSTER = "vc"
MAX_HOSTS = 200
MAX_RAILS = 16

MGMT_IF = "weft-mgmt"
MGMT_BRIDGE = "br-mgmt"
MGMT_NET = "198.19.255"          # within 198.18.0.0/15, the benchmarking range
HEAD_HOST_OCTET = 254
FAULT_CHAIN = "WEFT-FAULTS"      # iptables chain in each host, jumped to from INPUT


class Names:
    """Names of one cluster's namespaces, links and addresses."""

    def __init__(self, cluster):
        if not NAME_RE.match(cluster):
            raise ValueError(f"cluster name {cluster!r}: use 1-8 lowercase letters or digits")
        self.cluster = cluster
        self.prefix = f"weft-{cluster}-"
        self.switch_ns = self.prefix + "sw"
        self.head_ns = self.prefix + "head"

    def host_ns(self, host):
        return self.prefix + host

    def owns_ns(self, ns):
        return ns.startswith(self.prefix)


def host_name(i):
    return f"h{i}"


def host_index(host):
    """'h3' -> 3; raises ValueError for anything else."""
    m = re.fullmatch(r"h(\d+)", host)
    if not m:
        raise ValueError(f"{host!r} is not a host name (h0, h1, ...)")
    return int(m.group(1))


def rail_if(rail):
    return f"weft-r{rail}"


def rail_bridge(rail):
    return f"br-r{rail}"


def rail_subnet(rail):
    return f"198.18.{rail}.0/24"


def rail_addr(host_i, rail):
    return f"198.18.{rail}.{host_i + 1}"


def mgmt_subnet():
    return f"{MGMT_NET}.0/24"


def mgmt_addr(host_i):
    return f"{MGMT_NET}.{host_i + 1}"


def head_addr():
    return f"{MGMT_NET}.{HEAD_HOST_OCTET}"


def switch_port(host_i, rail):
    """The switch-side end of host i's rail link (rail None: its management link)."""
    return f"h{host_i}m" if rail is None else f"h{host_i}r{rail}"
