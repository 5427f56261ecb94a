"""Launching jobs on the cluster: the hostfile, the rsh agent and the mpirun command line.

mpirun itself runs in the head namespace (the cluster's login node, on the management
network only). It starts one Open MPI daemon per host through the agent, which enters the
host's namespace and a UTS namespace of its own, so each host also has its own hostname.
Daemons talk to mpirun directly (no tree spawn, routed=direct) over the management network,
so a fault between two hosts never cuts a job's launcher; ranks talk over the rails.

The agent also exports the host's fake devices (devices.py): WEFT_IB_SYSFS_ROOT and, if the
host has fake GPUs, WEFT_FAKE_NVML_STATE. Daemons inherit them and pass them to their
ranks, so every rank on hI reads hI's files; mpirun does not -x them (the caller's value
would overwrite every host's own)."""

import os
import shlex
import sys

from . import devices
from . import names as nm

PER_HOST_VARIABLES = ("WEFT_IB_SYSFS_ROOT", "WEFT_FAKE_NVML_STATE", "WEFT_INJECT_FILE")   # set by the agent

AGENT_TEMPLATE = """#!/bin/sh
# Open MPI launch agent of virtual cluster {cluster} (written by cluster/vcluster up).
# mpirun calls it as: agent HOST COMMAND... and it runs COMMAND on HOST, that is inside the
# host's network namespace, with the host's name as hostname.
host=$1
shift
case "$host" in
  {hosts}) ;;
  *) echo "vcluster agent: no host $host in cluster {cluster}" >&2; exit 2 ;;
esac
# The host's fake InfiniBand ports and GPUs (cluster/vcluster_lib/devices.py).
fake={fake}/$host
if [ -d "$fake/sys" ]; then export WEFT_IB_SYSFS_ROOT="$fake/sys"; fi
if [ -f "$fake/nvml.json" ]; then export WEFT_FAKE_NVML_STATE="$fake/nvml.json"; fi
# Faults running jobs re-read (scripts/inject corrupt; src/inject_file.hpp).
export WEFT_INJECT_FILE="$fake/inject"
exec ip netns exec "{prefix}$host" unshare --uts sh -c 'hostname "$1" && shift && exec sh -c "$*"' agent "$host" "$@"
"""


def hostfile_text(hosts, slots):
    return "".join(f"{nm.host_name(i)} slots={slots}\n" for i in range(hosts))


def agent_text(names, state, hosts):
    return AGENT_TEMPLATE.format(cluster=names.cluster, prefix=names.prefix,
                                 hosts="|".join(nm.host_name(i) for i in range(hosts)),
                                 fake=shlex.quote(devices.root(state)))


def etc_hosts_text(hosts, rails):
    """/etc/hosts inside every namespace: hI is rail 0, hI-rK rail K, hI-mgmt management."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{nm.head_addr()}\thead"]
    for i in range(hosts):
        h = nm.host_name(i)
        lines.append(f"{nm.mgmt_addr(i)}\t{h}-mgmt")
        for k in range(rails):
            lines.append(f"{nm.rail_addr(i, k)}\t{h}-r{k}" + (f" {h}" if k == 0 else ""))
    return "\n".join(lines) + "\n"


def rails_env_text(rails):
    """rails.env: what a program needs to use the rails (the same on every host)."""
    ifs = ",".join(nm.rail_if(k) for k in range(rails))
    subnets = ",".join(nm.rail_subnet(k) for k in range(rails))
    return (f"WEFT_VCLUSTER_RAILS={rails}\n"
            f"WEFT_VCLUSTER_RAIL_IFNAMES={ifs}\n"
            f"WEFT_VCLUSTER_RAIL_SUBNETS={subnets}\n"
            f"WEFT_SOCKET_IFNAME={nm.rail_if(0)}\n")


def _has_option(args, *options):
    return any(a in options or any(a.startswith(o + "=") for o in options) for a in args)


def mpirun_command(names, state, info, user_args, program, slots=None):
    """(argv, environment) of: ip netns exec HEAD mpirun <cluster options> <user args> program.

    WEFT_* variables of the caller's environment reach every rank (-x); WEFT_SOCKET_IFNAME
    defaults to rail 0's interface, which has the same name on every host. The per-host
    fake-device variables are the agent's, not the caller's (PER_HOST_VARIABLES)."""
    hostfile = state.path("hostfile")
    if slots is not None and slots != info["slots"]:
        hostfile = state.path(f"hostfile.slots{slots}")
        state.write_text(os.path.basename(hostfile), hostfile_text(info["hosts"], slots))
    args = ["mpirun"]
    if os.geteuid() == 0:
        args.append("--allow-run-as-root")
    args += ["--hostfile", hostfile,
             "--mca", "plm_rsh_agent", state.path("agent"),
             "--mca", "plm_rsh_no_tree_spawn", "1",
             "--mca", "routed", "direct",
             "--mca", "oob_tcp_if_include", nm.mgmt_subnet(),
             "--mca", "btl_tcp_if_include", nm.rail_subnet(0)]
    # Every daemon sees the whole machine, so Open MPI's default binding would put the first
    # rank of every host on the same core.
    if not _has_option(user_args, "--bind-to", "-bind-to"):
        args += ["--bind-to", "none"]
    env = dict(os.environ)
    env.setdefault("WEFT_SOCKET_IFNAME", nm.rail_if(0))
    per_host = PER_HOST_VARIABLES if devices.has_devices(info) else ()
    for key in sorted(env):
        if key in per_host:
            del env[key]
            print(f"vcluster: {key} of the caller not passed on: each host's agent sets "
                  "its own (docs/CLUSTER.md)", file=sys.stderr)
        elif key.startswith("WEFT_") and not key.startswith("WEFT_VCLUSTER"):
            args += ["-x", key]
    argv = ["ip", "netns", "exec", names.head_ns, *args, *user_args, *program]
    return argv, env


def split_mpirun_args(argv):
    """vcluster mpirun [--slots K] [--dry-run] [mpirun args] -- program args."""
    if "--" not in argv:
        raise ValueError("vcluster mpirun: put -- between mpirun's arguments and the program, "
                         "e.g. vcluster mpirun -np 4 -- build-b/tools/weft run")
    cut = argv.index("--")
    front, program = argv[:cut], argv[cut + 1:]
    if not program:
        raise ValueError("vcluster mpirun: no program after --")
    slots, dry_run, rest = None, False, []
    i = 0
    while i < len(front):
        a = front[i]
        if a == "--slots" and i + 1 < len(front):
            slots = int(front[i + 1])
            i += 2
            continue
        if a.startswith("--slots="):
            slots = int(a.split("=", 1)[1])
        elif a == "--dry-run":
            dry_run = True
        else:
            rest.append(a)
        i += 1
    if slots is not None and slots < 1:
        raise ValueError("--slots must be at least 1")
    return slots, dry_run, rest, program
