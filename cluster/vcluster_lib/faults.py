"""Faults: each one applied, recorded in faults.json, listed by `vcluster status` and
undone by `scripts/inject clear`.

Packet faults are iptables rules in the receiving host's WEFT-FAULTS chain (INPUT), tagged
with the fault's id, one set per direction, so only that pair of hosts sees them. Rate
faults are tbf qdiscs (cluster.apply_rate). Faults that last in time (flap, stop) run a
bounded background process recorded by (pid, start time) so clear and down can stop it.

A fault is recorded before it is applied, so clear finds even a half-applied one.
To add a fault kind (the counter storms: ECC, NVLink CRC/replay, InfiniBand symbol errors),
write its apply function, add a row to KINDS, and give _undo a branch for its kind."""

import signal
import time

from . import cluster as cl
from . import names as nm
from . import net
from . import procs


class Ctx:
    """What every fault needs: the cluster's names, its state, and its shape."""

    def __init__(self, names, state):
        self.names, self.state = names, state
        self.info = cl.load(state)

    def host_ns(self, host):
        cl.check_host(self.info, host)
        return self.names.host_ns(host)

    def addresses(self, host):
        """Every address of host: its rails and its management link."""
        i = cl.check_host(self.info, host)
        return [nm.rail_addr(i, k) for k in range(self.info["rails"])] + [nm.mgmt_addr(i)]


def _pair(ctx, a, b):
    if a == b:
        raise cl.ClusterError(f"{a} and {b} are one host; name two different hosts")
    for h in (a, b):
        cl.check_host(ctx.info, h)
    return sorted((a, b), key=nm.host_index)


def _drop_between(ctx, a, b, tag, probability=None):
    """DROP (a random fraction, if probability) of packets from b arriving at a and from a
    arriving at b."""
    match = [] if probability is None else [
        "-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}"]
    for dst, src in ((a, b), (b, a)):
        for addr in ctx.addresses(src):
            tagged = ["-A", nm.FAULT_CHAIN, "-s", addr, "-m", "comment", "--comment", tag]
            net.iptables(ctx.host_ns(dst), *tagged)   # counts what arrives, for status
            net.iptables(ctx.host_ns(dst), *tagged, *match, "-j", "DROP")


def _undrop_between(ctx, a, b, tag):
    for h in (a, b):
        net.delete_tagged(ctx.host_ns(h), nm.FAULT_CHAIN, tag)


def _record(ctx, fault):
    """Replaces any fault with the same id (so repeating a command is idempotent)."""
    fault["since"] = time.strftime("%H:%M:%S")
    faults = [f for f in ctx.state.faults() if f["id"] != fault["id"]] + [fault]
    ctx.state.set_faults(faults)
    ctx.state.log_event(f"inject {fault['id']}: {fault['desc']}")
    print(f"inject: {fault['id']}: {fault['desc']}")


def _replace_existing(ctx, fault_id):
    for f in ctx.state.faults():
        if f["id"] == fault_id:
            _undo(ctx, f)


# --- the fault kinds ----------------------------------------------------------------------

def loss(ctx, args):
    a, b = _pair(ctx, args.a, args.b)
    if not 0.0 < args.p <= 1.0:
        raise cl.ClusterError(f"loss: P={args.p} must lie in (0, 1], e.g. 0.02 for 2%")
    fid = f"loss-{a}-{b}"
    _replace_existing(ctx, fid)
    _record(ctx, {"id": fid, "kind": "loss", "hosts": [a, b], "probability": args.p,
                  "desc": f"drop {args.p:.4g} ({args.p * 100:.3g}%) of packets between "
                          f"{a} and {b}, each way"})
    _drop_between(ctx, a, b, fid, probability=args.p)


def partition(ctx, args):
    a, b = _pair(ctx, args.a, args.b)
    fid = f"partition-{a}-{b}"
    _replace_existing(ctx, fid)
    _record(ctx, {"id": fid, "kind": "partition", "hosts": [a, b],
                  "desc": f"no packets between {a} and {b}"})
    _drop_between(ctx, a, b, fid)


def degrade(ctx, args):
    cl.check_rail(ctx.info, args.rail)
    i = cl.check_host(ctx.info, args.a)
    bits = net.parse_rate(args.rate)
    rails = range(ctx.info["rails"]) if args.rail is None else [args.rail]
    suffix = "" if args.rail is None else f"-r{args.rail}"
    fid = f"degrade-{args.a}{suffix}"
    fault = {"id": fid, "kind": "degrade", "hosts": [args.a], "rate": bits,
             "links": [f"{args.a}/{k}" for k in rails],
             "desc": f"{args.a} rail(s) {','.join(map(str, rails))} limited to {args.rate} "
                     "(tbf, both directions)"}
    _record(ctx, fault)
    for k in rails:
        cl.apply_rate(ctx.names, ctx.state, ctx.info, i, k)


def flap(ctx, args):
    a, b = _pair(ctx, args.a, args.b)
    if not 0.2 <= args.period <= 600 or not 1 <= args.cycles <= 1000:
        raise cl.ClusterError("flap: --period 0.2..600 seconds, --cycles 1..1000")
    fid = f"flap-{a}-{b}"
    _replace_existing(ctx, fid)
    seconds = min(args.period * args.cycles, args.max_seconds)
    work = _flapper(ctx, a, b, fid, args.period / 2, args.cycles, seconds)
    pid, started = procs.spawn_daemon(work, ctx.state.path("daemons.log"))
    _record(ctx, {"id": fid, "kind": "flap", "hosts": [a, b], "pid": pid,
                  "pid_start": started, "until": time.strftime(
                      "%H:%M:%S", time.localtime(time.time() + seconds)),
                  "desc": f"partition {a}-{b} {args.period / 2:g}s, heal {args.period / 2:g}s, "
                          f"{args.cycles} cycles (at most {seconds:g}s)"})


def _flapper(ctx, a, b, fid, half, cycles, seconds):
    def work():
        end = time.monotonic() + seconds
        finished = _run_bounded(lambda: _flap_loop(ctx, a, b, fid, half, cycles, end))
        _undrop_between(ctx, a, b, fid)
        if finished:
            _forget(ctx, fid)
    return work


def _flap_loop(ctx, a, b, fid, half, cycles, end):
    for _ in range(cycles):
        if time.monotonic() >= end:
            return
        _drop_between(ctx, a, b, fid)
        time.sleep(max(0.0, min(half, end - time.monotonic())))
        _undrop_between(ctx, a, b, fid)
        time.sleep(max(0.0, min(half, end - time.monotonic())))


def stop(ctx, args):
    if not 0 < args.seconds <= 3600:
        raise cl.ClusterError("stop: SECONDS must lie in (0, 3600]")
    fid = f"stop-r{args.rank}"
    _replace_existing(ctx, fid)
    targets = _rank_processes(ctx, args.rank, args.job)
    for t in targets:
        procs.signal_process(t["pid"], t["start"], signal.SIGSTOP)
    work = _resumer(ctx, fid, targets, args.seconds)
    pid, started = procs.spawn_daemon(work, ctx.state.path("daemons.log"))
    where = ", ".join(f"pid {t['pid']} on {t['host']}" for t in targets)
    _record(ctx, {"id": fid, "kind": "stop", "rank": args.rank, "targets": targets,
                  "hosts": sorted({t["host"] for t in targets}), "pid": pid,
                  "pid_start": started, "until": time.strftime(
                      "%H:%M:%S", time.localtime(time.time() + args.seconds)),
                  "desc": f"rank {args.rank} stopped (SIGSTOP) for {args.seconds:g}s ({where})"})


def _resumer(ctx, fid, targets, seconds):
    def work():
        if _run_bounded(lambda: time.sleep(seconds)):
            _continue(targets)
            _forget(ctx, fid)
    return work


def _continue(targets):
    for t in targets:
        procs.signal_process(t["pid"], t["start"], signal.SIGCONT)


def kill(ctx, args):
    """Not undoable, so not a lasting fault: logged in events.log only."""
    targets = _rank_processes(ctx, args.rank, args.job)
    for t in targets:
        procs.signal_process(t["pid"], t["start"], signal.SIGKILL)
    where = ", ".join(f"pid {t['pid']} on {t['host']}" for t in targets)
    ctx.state.log_event(f"inject kill: rank {args.rank} ({where})")
    print(f"inject: killed rank {args.rank} (SIGKILL: {where})")
    _replace_existing(ctx, f"stop-r{args.rank}")   # nothing left to resume


def _rank_processes(ctx, rank, job):
    found = procs.find_rank(cl.host_namespaces(ctx.names, ctx.info), rank)
    if job is not None:
        found = [p for p in found if p["job"] == job]
    if not found:
        raise cl.ClusterError(f"no process of rank {rank} runs in the cluster's hosts "
                              "(looked for OMPI_COMM_WORLD_RANK / WEFT_RANK)")
    jobs = sorted({p["job"] for p in found})
    if len(jobs) > 1:
        raise cl.ClusterError(f"rank {rank} exists in several jobs ({', '.join(jobs)}): "
                              "pick one with --job")
    return found


# --- undo ---------------------------------------------------------------------------------

def _run_bounded(body):
    """Runs body in a daemon; True if it ran to its end, False if SIGTERM (clear) ended it."""
    class Stopped(Exception):
        pass

    def on_term(*_):
        raise Stopped()
    signal.signal(signal.SIGTERM, on_term)
    try:
        body()
        return True
    except Stopped:
        return False
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _forget(ctx, fid):
    """A daemon that finished on its own removes its record (clear no longer has to)."""
    with ctx.state.lock():
        ctx.state.set_faults([f for f in ctx.state.faults() if f["id"] != fid])
        ctx.state.log_event(f"{fid} ended")


def _undo(ctx, f):
    if f.get("pid"):
        procs.stop_daemon(f["pid"], f.get("pid_start"))
    if f["kind"] in ("loss", "partition", "flap"):
        _undrop_between(ctx, f["hosts"][0], f["hosts"][1], f["id"])
    elif f["kind"] == "stop":
        _continue(f["targets"])
    ctx.state.set_faults([g for g in ctx.state.faults() if g["id"] != f["id"]])
    if f["kind"] == "degrade":
        for link in f["links"]:
            host, rail = link.split("/")
            cl.apply_rate(ctx.names, ctx.state, ctx.info, nm.host_index(host), int(rail))
    ctx.state.log_event(f"clear {f['id']}")
    print(f"inject: cleared {f['id']}")


def clear(ctx, args):
    """clear: every fault; clear A: faults touching host A; clear A B: faults between A and
    B; clear ID: the fault with that id (as status lists it)."""
    faults = ctx.state.faults()
    sel = args.targets
    if not sel:
        chosen = faults
    elif len(sel) == 1 and any(f["id"] == sel[0] for f in faults):
        chosen = [f for f in faults if f["id"] == sel[0]]
    elif len(sel) == 1:
        if not any(f["id"] == sel[0] for f in faults) and not sel[0].startswith("h"):
            raise cl.ClusterError(f"no active fault {sel[0]!r} (vcluster status lists them)")
        cl.check_host(ctx.info, sel[0])
        chosen = [f for f in faults if sel[0] in f.get("hosts", [])]
    elif len(sel) == 2:
        pair = set(_pair(ctx, *sel))
        chosen = [f for f in faults if set(f.get("hosts", [])) == pair]
    else:
        raise cl.ClusterError("clear takes nothing, a host, two hosts, or a fault id")
    for f in chosen:
        _undo(ctx, f)
    if not chosen:
        print("inject: nothing to clear")


def clear_all_locked(state):
    """For `down`: stops background processes and resumes stopped ranks, even on a half-made
    cluster (rules and qdiscs go with the namespaces)."""
    for f in state.faults():
        if f.get("pid"):
            procs.stop_daemon(f["pid"], f.get("pid_start"))
        if f["kind"] == "stop":
            _continue(f["targets"])
    state.set_faults([])


def _hosts(p, *names):
    for name in names:
        p.add_argument(name.lower(), metavar=name, help="a host: h0, h1, ...")


def _rank(p):
    p.add_argument("rank", type=int, metavar="RANK",
                   help="OMPI_COMM_WORLD_RANK (or WEFT_RANK) of the rank")
    p.add_argument("--job", help="Open MPI job id, if several jobs run")


def _flap_args(p):
    _hosts(p, "A", "B")
    p.add_argument("--period", type=float, required=True,
                   help="seconds per cycle: half partitioned, half healed")
    p.add_argument("--cycles", type=int, default=10, help="cycles to run (default 10)")
    p.add_argument("--max-seconds", type=float, default=600,
                   help="stop after this long in any case (default 600)")


# name -> (help, argument adder, apply). Counter storms (ecc, nvlink-crc, nvlink-replay,
# ib-symbol) go here too: one row each, their apply writing the counters their monitor reads.
KINDS = {
    "loss": ("drop fraction P of packets between hosts A and B (both ways; iptables statistic)",
             lambda p: (_hosts(p, "A", "B"),
                        p.add_argument("p", type=float, metavar="P",
                                       help="fraction of packets, e.g. 0.02")), loss),
    "partition": ("no packets between hosts A and B; every other pair still talks",
                  lambda p: _hosts(p, "A", "B"), partition),
    "degrade": ("limit host A's link(s) to RATE (tbf on both ends), e.g. 500mbit",
                lambda p: (_hosts(p, "A"), p.add_argument("rate", metavar="RATE",
                                                          help="tc rate: 2gbit, 500mbit, ..."),
                           p.add_argument("--rail", type=int, help="one rail (default: all)")),
                degrade),
    "flap": ("partition A-B and heal, repeatedly, in a bounded background process",
             _flap_args, flap),
    "kill": ("SIGKILL one rank of a running job (found by its environment in the hosts)",
             _rank, kill),
    "stop": ("SIGSTOP one rank for SECONDS, then SIGCONT it (clear resumes it at once)",
             lambda p: (_rank(p), p.add_argument("seconds", type=float, metavar="SECONDS")),
             stop),
    "clear": ("undo faults: all; those of host A; those between A and B; or one by id",
              lambda p: p.add_argument("targets", nargs="*", metavar="A [B] | ID"), clear),
}
