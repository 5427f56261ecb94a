"""Faults: each one applied, recorded in faults.json, listed by `vcluster status` and
undone by `scripts/inject clear`.

Packet faults are iptables rules in the receiving host's WEFT-FAULTS chain (INPUT), tagged
with the fault's id, one set per direction, so only that pair of hosts sees them. Rate
faults are tbf qdiscs (cluster.apply_rate). Faults that last in time (flap, stop, and the
counter storms) run a bounded background process recorded by (pid, start time) so clear
and down can stop it.

Counter storms drive a host's fake devices (devices.py): ecc-storm (volatile ECC errors of
one GPU), nvlink-storm (one NVLink counter of one GPU), ib-errors (one counter of port 1 of
mlx5_K, rail K) add R per second for S seconds, writing what is due every TICK seconds; xid
appends XID events at once (recorded, no process). Counters are cumulative, as on real
hardware: clear stops a storm and leaves the counters where they are.

A fault is recorded before it is applied, so clear finds even a half-applied one.
To add a fault kind, write its apply function, add a row to KINDS, and give _undo a branch
for its kind if stopping its background process (pid) is not all there is to undo."""

import math
import signal
import time

from . import cluster as cl
from . import devices
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


def _drop_between(ctx, a, b, tag, probability=None, rail=None):
    """DROP (a random fraction, if probability) of packets from b arriving at a and from a
    arriving at b (only those from rail `rail`'s addresses, if given)."""
    match = [] if probability is None else [
        "-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}"]
    for dst, src in ((a, b), (b, a)):
        sources = (ctx.addresses(src) if rail is None
                   else [nm.rail_addr(cl.check_host(ctx.info, src), rail)])
        for addr in sources:
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
    rail = args.rail
    if rail is not None:
        cl.check_rail(ctx.info, rail)
    fid = f"loss-{a}-{b}" + ("" if rail is None else f"-r{rail}")
    where = "" if rail is None else f" on rail {rail} ({nm.rail_if(rail)})"
    _replace_existing(ctx, fid)
    _record(ctx, {"id": fid, "kind": "loss", "hosts": [a, b], "probability": args.p,
                  "desc": f"drop {args.p:.4g} ({args.p * 100:.3g}%) of packets between "
                          f"{a} and {b}{where}, each way"})
    _drop_between(ctx, a, b, fid, probability=args.p, rail=rail)


def partition(ctx, args):
    a, b = _pair(ctx, args.a, args.b)
    rail = args.rail
    if rail is not None:
        cl.check_rail(ctx.info, rail)
    fid = f"partition-{a}-{b}" + ("" if rail is None else f"-r{rail}")
    where = "" if rail is None else f" on rail {rail} ({nm.rail_if(rail)})"
    _replace_existing(ctx, fid)
    _record(ctx, {"id": fid, "kind": "partition", "hosts": [a, b],
                  "desc": f"no packets between {a} and {b}{where}"})
    _drop_between(ctx, a, b, fid, rail=rail)


def corrupt(ctx, args):
    """Silent corruption on the A-B link, each way: weft's receivers flip bits in what they
    get from the other host (WEFT_INJECT_FILE, written per host and re-read by running
    jobs), after the sender's CRC32C and before the receiver's check."""
    a, b = _pair(ctx, args.a, args.b)
    if not 0.0 < args.rate <= 1.0:
        raise cl.ClusterError(f"corrupt: RATE={args.rate} must lie in (0, 1], e.g. 1e-6")
    fid = f"corrupt-{a}-{b}"
    _replace_existing(ctx, fid)
    _record(ctx, {"id": fid, "kind": "corrupt", "hosts": [a, b], "rate": args.rate,
                  "desc": f"flip a bit in {args.rate:g} of the bytes weft receives between "
                          f"{a} and {b}, each way (after the sender's CRC32C)"})
    _write_inject_files(ctx)


def _write_inject_files(ctx):
    """Every host's inject file from the recorded corrupt faults (src/inject_file.hpp)."""
    corrupts = [f for f in ctx.state.faults() if f["kind"] == "corrupt"]
    for i in range(ctx.info["hosts"]):
        host = nm.host_name(i)
        lines = []
        for f in corrupts:
            if host in f["hosts"]:
                other = f["hosts"][1] if f["hosts"][0] == host else f["hosts"][0]
                lines.append(f"corrupt {f['rate']:g} {' '.join(ctx.addresses(other))}\n")
        devices.write_inject_file(ctx.state, host, "".join(lines))


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


# --- counter storms on the fake devices ---------------------------------------------------

TICK = 0.2                 # seconds between a storm's writes
MAX_STORM_SECONDS = 3600
MAX_RATE = 1e9             # per second
COUNTER_KINDS = ("ecc-storm", "nvlink-storm", "ib-errors", "xid")


def _fake(ctx, host):
    cl.check_host(ctx.info, host)
    if not devices.has_devices(ctx.info):
        raise cl.ClusterError(f"cluster {ctx.names.cluster} was made without fake devices: "
                              "bring it up again (vcluster up N --replace ...)")


def _check_gpu(ctx, host, gpu):
    _fake(ctx, host)
    n = devices.gpus(ctx.info)
    if n == 0:
        raise cl.ClusterError(f"{host} has no fake GPUs (the cluster was brought up with "
                              "--gpus 0)")
    if not 0 <= gpu < n:
        raise cl.ClusterError(f"no GPU {gpu} on {host}: it has GPUs 0..{n - 1}")


def _check_link(ctx, host, gpu, link):
    n = devices.gpus(ctx.info)
    if n < 2:
        raise cl.ClusterError(f"GPU {gpu} of {host} has no NVLinks (one GPU per host)")
    if not 0 <= link < n - 1:
        peers = ", ".join(f"{j}->GPU {p}" for j, p in enumerate(x for x in range(n) if x != gpu))
        raise cl.ClusterError(f"no NVLink {link} on GPU {gpu} of {host}: it has links "
                              f"0..{n - 2} ({peers})")


def _check_storm(kind, rate, seconds):
    if not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
        raise cl.ClusterError(f"{kind}: --rate {rate:g} must lie in (0, {MAX_RATE:g}] per second")
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_STORM_SECONDS):
        raise cl.ClusterError(f"{kind}: --duration {seconds:g} must lie in "
                              f"(0, {MAX_STORM_SECONDS}] seconds")


def _storm(ctx, fault, add):
    """Starts the bounded background process that calls add(n) with the n events due so
    far every TICK seconds, and records the fault (its id replaces any earlier storm with
    the same id; the counters keep what that one added)."""
    rate, seconds = fault["rate"], fault["duration"]
    _replace_existing(ctx, fault["id"])
    work = _stormer(ctx, fault["id"], rate, seconds, add)
    pid, started = procs.spawn_daemon(work, ctx.state.path("daemons.log"))
    fault.update({"pid": pid, "pid_start": started, "until": time.strftime(
        "%H:%M:%S", time.localtime(time.time() + seconds))})
    _record(ctx, fault)


def _stormer(ctx, fid, rate, seconds, add):
    def work():
        if _run_bounded(lambda: _storm_loop(rate, seconds, add)):
            _forget(ctx, fid)
    return work


def _storm_loop(rate, seconds, add):
    start = time.monotonic()
    end = start + seconds
    done = 0
    while True:
        now = min(time.monotonic(), end)
        due = int(rate * (now - start) + 1e-9) - done
        if due > 0:
            _uninterrupted(add, due)
            done += due
        if now >= end:
            return
        time.sleep(min(TICK, end - now))


def _uninterrupted(fn, *args):
    """Runs fn with SIGTERM held back, so clear never stops a storm halfway through a write
    (a SIGTERM that arrives meanwhile is delivered when fn returns)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    try:
        fn(*args)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])


def ecc_storm(ctx, args):
    h, g = args.host, args.gpu
    _check_gpu(ctx, h, g)
    _check_storm("ecc-storm", args.rate, args.duration)
    which = "uncorrected" if args.uncorrected else "corrected"
    fid = f"ecc-{h}-g{g}" + ("-unc" if args.uncorrected else "")
    state = ctx.state
    _storm(ctx, {"id": fid, "kind": "ecc-storm", "hosts": [h], "gpu": g, "counter": which,
                 "rate": args.rate, "duration": args.duration,
                 "file": devices.nvml_path(state, h),
                 "desc": f"+{args.rate:g}/s {which} ECC errors on {h} GPU {g} "
                         f"({devices.bus_id(g)}) for {args.duration:g}s"},
           lambda n: devices.add_ecc(state, h, g, n, args.uncorrected))


def nvlink_storm(ctx, args):
    h, g, link, c = args.host, args.gpu, args.link, args.counter
    _check_gpu(ctx, h, g)
    _check_link(ctx, h, g, link)
    _check_storm("nvlink-storm", args.rate, args.duration)
    remote = [x for x in range(devices.gpus(ctx.info)) if x != g][link]
    state = ctx.state
    _storm(ctx, {"id": f"nvlink-{h}-g{g}-l{link}-{c}", "kind": "nvlink-storm", "hosts": [h],
                 "gpu": g, "link": link, "counter": c, "rate": args.rate,
                 "duration": args.duration, "file": devices.nvml_path(state, h),
                 "desc": f"+{args.rate:g}/s NVLink {c} on {h} GPU {g} link {link} (to GPU "
                         f"{remote}) for {args.duration:g}s"},
           lambda n: devices.add_nvlink(state, h, g, link, c, n))


def ib_errors(ctx, args):
    h, k, c = args.host, args.rail, args.counter
    _fake(ctx, h)
    cl.check_rail(ctx.info, k)
    _check_storm("ib-errors", args.rate, args.duration)
    state = ctx.state
    dev = devices.ib_device(k)
    _storm(ctx, {"id": f"ib-{h}-r{k}-{c}", "kind": "ib-errors", "hosts": [h], "rail": k,
                 "counter": c, "rate": args.rate, "duration": args.duration,
                 "file": devices.counter_path(state, h, k, c),
                 "desc": f"+{args.rate:g}/s {c} on {h} {dev} port {devices.IB_PORT} "
                         f"({nm.rail_if(k)}) for {args.duration:g}s"},
           lambda n: devices.add_ib(state, h, k, c, n))


def xid(ctx, args):
    """Immediate: appends the events and records them (status lists them; clear forgets
    the record, the events stay in the GPU's list)."""
    h, g = args.host, args.gpu
    _check_gpu(ctx, h, g)
    if not 1 <= args.xid <= 65535:
        raise cl.ClusterError(f"xid: --xid {args.xid} must lie in 1..65535 (e.g. 79: GPU has "
                              "fallen off the bus)")
    if not 1 <= args.count <= 1000:
        raise cl.ClusterError(f"xid: --count {args.count} must lie in 1..1000")
    fid = f"xid-{h}-g{g}-{args.xid}"
    total = args.count + sum(f.get("count", 0) for f in ctx.state.faults() if f["id"] == fid)
    _record(ctx, {"id": fid, "kind": "xid", "hosts": [h], "gpu": g, "xid": args.xid,
                  "count": total, "file": devices.nvml_path(ctx.state, h),
                  "desc": f"XID {args.xid} on {h} GPU {g} ({devices.bus_id(g)}), "
                          f"{total} event(s)"})
    devices.add_xids(ctx.state, h, g, args.xid, args.count)


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
    if f["kind"] == "corrupt":
        _write_inject_files(ctx)
    if f["kind"] == "degrade":
        for link in f["links"]:
            host, rail = link.split("/")
            cl.apply_rate(ctx.names, ctx.state, ctx.info, nm.host_index(host), int(rail))
    ctx.state.log_event(f"clear {f['id']}")
    kept = " (counters keep their values)" if f["kind"] in COUNTER_KINDS else ""
    print(f"inject: cleared {f['id']}{kept}")


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


def _storm_args(p, gpu=False, link=False, rail=False, counters=None):
    p.add_argument("host", metavar="HOST", help="a host: h0, h1, ...")
    if gpu:
        p.add_argument("--gpu", type=int, required=True, metavar="G", help="GPU index, 0..")
    if link:
        p.add_argument("--link", type=int, required=True, metavar="L",
                       help="NVLink of the GPU, 0..G-2 (link j: j-th other GPU by index)")
    if rail:
        p.add_argument("--rail", type=int, required=True, metavar="K",
                       help="rail K: InfiniBand device mlx5_K, port 1")
    p.add_argument("--rate", type=float, required=True, metavar="R",
                   help="events added per second (written every 0.2 s)")
    p.add_argument("--duration", type=float, required=True, metavar="S",
                   help=f"seconds, 0 < S <= {MAX_STORM_SECONDS}; the storm then ends by itself")
    if counters:
        p.add_argument("--counter", choices=counters, default=counters[0],
                       help=f"which counter (default {counters[0]})")


def _ecc_args(p):
    _storm_args(p, gpu=True)
    p.add_argument("--uncorrected", action="store_true",
                   help="uncorrected (double-bit) errors instead of corrected ones")


def _xid_args(p):
    p.add_argument("host", metavar="HOST", help="a host: h0, h1, ...")
    p.add_argument("--gpu", type=int, required=True, metavar="G", help="GPU index, 0..")
    p.add_argument("--xid", type=int, required=True, metavar="N",
                   help="XID number, e.g. 48 (DBE), 74 (NVLink), 79 (fallen off the bus)")
    p.add_argument("--count", type=int, default=1, metavar="C", help="events (default 1)")


# name -> (help, argument adder, apply).
KINDS = {
    "loss": ("drop fraction P of packets between hosts A and B (both ways; iptables "
             "statistic; on one rail with --rail K)",
             lambda p: (_hosts(p, "A", "B"),
                        p.add_argument("p", type=float, metavar="P",
                                       help="fraction of packets, e.g. 0.02"),
                        p.add_argument("--rail", type=int, metavar="K",
                                       help="only rail K (default: every address)")), loss),
    "partition": ("no packets between hosts A and B (on one rail with --rail K); every other "
                  "pair still talks",
                  lambda p: (_hosts(p, "A", "B"),
                             p.add_argument("--rail", type=int, metavar="K",
                                            help="only rail K (default: every address)")),
                  partition),
    "corrupt": ("flip bits in RATE of the bytes weft receives between hosts A and B, each way, "
                "after the sender's checksum (running jobs pick it up within a second)",
                lambda p: (_hosts(p, "A", "B"),
                           p.add_argument("rate", type=float, metavar="RATE",
                                          help="per byte, e.g. 1e-6")), corrupt),
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
    "ecc-storm": ("add R volatile ECC errors per second to a fake GPU of HOST for S seconds",
                  _ecc_args, ecc_storm),
    "nvlink-storm": ("add R per second to one NVLink counter of a fake GPU for S seconds",
                     lambda p: _storm_args(p, gpu=True, link=True,
                                           counters=devices.NVLINK_COUNTERS), nvlink_storm),
    "ib-errors": ("add R per second to one counter of HOST's fake InfiniBand port mlx5_K/1",
                  lambda p: _storm_args(p, rail=True, counters=devices.IB_COUNTERS),
                  ib_errors),
    "xid": ("append C XID N events to a fake GPU's event list (at once)", _xid_args, xid),
    "clear": ("undo faults: all; those of host A; those between A and B; or one by id",
              lambda p: p.add_argument("targets", nargs="*", metavar="A [B] | ID"), clear),
}
