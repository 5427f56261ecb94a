"""Helpers for the robustness tests that run a real job: a port for its coordinator, its
ranks' pids under mpirun, ending the whole job whatever state it is in, and the closing
report."""

import os
import random
import signal
import socket


def free_port():
    """A free loopback port below the kernel's ephemeral range (ip_local_port_range): a port
    the kernel picked for a socket bound to port 0 may be its pick again at once, for a rank's
    own listener, before the coordinator listens there (tests/unit/free_port.hpp)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    candidates = [random.randrange(10000, low) for _ in range(64)] if low - 10000 >= 1000 else []
    for port in candidates + [0]:
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
                return s.getsockname()[1]
        except OSError:
            continue
    raise OSError("no free loopback port")


def rank_pids(mpirun_pid):
    """Rank -> pid of mpirun's children, read from their OMPI_COMM_WORLD_RANK."""
    ranks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        for var in env:
            if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(var.split(b"=", 1)[1])] = int(entry)
    return ranks


def end_job(job, pids=()):
    """Kills mpirun's process group (started with start_new_session) and `pids`: SIGCONT
    first, so that a stopped rank sees what follows, then SIGKILL."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.killpg(job.pid, sig)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    job.wait()


def report(failures):
    """Prints each failure and the closing line ctest's log shows; returns the exit code."""
    for f in failures:
        print("FAIL:", f)
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0
