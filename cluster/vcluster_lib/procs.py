"""Processes inside the cluster's hosts: finding a rank, signalling it safely, and the
bounded background processes that flap links or resume stopped ranks.

A process is named by (pid, start time) so a signal never reaches a later process that
reused the pid. Only processes whose network namespace is one of the cluster's are ever
looked at, so other jobs on the machine are safe."""

import os
import signal
import time
import traceback

from . import net


def start_time(pid):
    """Field 22 of /proc/PID/stat (clock ticks since boot), or None if pid is gone or a
    zombie (no one may reap our daemons' zombies in a container)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def alive(pid, started):
    return pid is not None and start_time(pid) == started


def signal_process(pid, started, sig):
    """Sends sig to pid if it is still the process started at `started`."""
    if not alive(pid, started):
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def processes_in(host_namespaces):
    """Yields (pid, host) for every process whose network namespace is one of
    host_namespaces ({host: namespace name})."""
    by_inode = {}
    for host, ns in host_namespaces.items():
        inode = net.netns_inode(ns)
        if inode is not None:
            by_inode[inode] = host
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            inode = os.stat(f"/proc/{entry}/ns/net").st_ino
        except OSError:
            continue
        if inode in by_inode:
            yield int(entry), by_inode[inode]


def find_rank(host_namespaces, rank):
    """Processes of rank `rank` (OMPI_COMM_WORLD_RANK or WEFT_RANK) inside the hosts, as
    dicts with pid, start, host, job (Open MPI's job id, or '') and cmdline."""
    found = []
    for pid, host in processes_in(host_namespaces):
        env = _environ(pid)
        if env.get("OMPI_COMM_WORLD_RANK", env.get("WEFT_RANK")) != str(rank):
            continue
        started = start_time(pid)
        if started is not None:
            found.append({"pid": pid, "start": started, "host": host,
                          "job": env.get("OMPI_MCA_ess_base_jobid", ""),
                          "cmdline": _cmdline(pid)})
    return found


def kill_all_in(host_namespaces, grace=2.0):
    """SIGTERM, then SIGKILL after `grace` seconds, every process inside the namespaces.
    Returns how many there were."""
    victims = [(pid, start_time(pid)) for pid, _ in processes_in(host_namespaces)]
    for pid, started in victims:
        signal_process(pid, started, signal.SIGCONT)   # a stopped process cannot exit
        signal_process(pid, started, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(alive(p, s) for p, s in victims):
        time.sleep(0.05)
    for pid, started in victims:
        signal_process(pid, started, signal.SIGKILL)
    return len(victims)


def spawn_daemon(work, log_path):
    """Runs work() in a detached grandchild (own session, stdout/stderr to log_path);
    returns its (pid, start time). work must bound its own run time."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.closerange(3, w)
            os.closerange(w + 1, 4096)   # the caller's lock and pipes stay with the caller
            null = os.open(os.devnull, os.O_RDONLY)
            log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            work()
            os._exit(0)
        except BaseException:   # the daemon reports in its log; the caller never sees it
            traceback.print_exc()
            os._exit(1)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 32)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(child, 0)
    if not data:
        raise RuntimeError(f"background process failed to start; see {log_path}")
    pid = int(data)
    return pid, start_time(pid)


def stop_daemon(pid, started, timeout=5.0):
    """SIGTERMs a daemon from spawn_daemon and waits (bounded) until it is gone."""
    if not signal_process(pid, started, signal.SIGTERM):
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end and alive(pid, started):
        time.sleep(0.05)
    signal_process(pid, started, signal.SIGKILL)
