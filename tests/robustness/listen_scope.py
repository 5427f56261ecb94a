#!/usr/bin/env python3
"""Ranks that all share this host listen on loopback alone (issue 19, item 9).

Usage: listen_scope.py MPIRUN WEFT_BINARY

Runs `weft bench allreduce -N 0` (the sweep over and over until a signal) on 2 ranks, once
under mpirun and once by hand with WEFT_COORDINATOR on 127.0.0.1, reads every listening tcp
socket of the ranks with `ss`, and requires each to be on 127.0.0.1: nothing from another
host is needed, so nothing from another host may reach a listener. Every rank used to listen
twice on the default interface. Then it stops the job with SIGUSR1 (a clean stop) and
requires exit 0.

Every wait is bounded; every process is killed on the way out. Exits 0 on success, 1 on
failure, 77 (skip) without ss.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

from job_tools import end_job, free_port, rank_pids, report

RANKS = 2
START_S = 60
BENCH = ["bench", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-N", "0"]


def listening(pids):
    """(pid, local address) of every listening tcp socket of `pids`."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        for pid in map(int, re.findall(r"pid=(\d+)", line)):
            if pid in pids:
                found.append((pid, fields[3]))
    return found


def wait_for_ranks(find_pids, log_path):
    start = time.monotonic()
    while time.monotonic() - start < START_S:
        with open(log_path) as f:
            if "# cycle 2" in f.read():
                pids = find_pids()
                if len(pids) == RANKS:
                    return pids
        time.sleep(0.2)
    return None


def check(name, pids, failures):
    sockets = listening(set(pids))
    print(f"{name}: listening sockets of the ranks: {sockets}")
    if len(sockets) < RANKS:
        failures.append(f"{name}: found {len(sockets)} listening sockets, expected some per rank")
    for pid, addr in sockets:
        if not addr.startswith("127.0.0.1:"):
            failures.append(f"{name}: rank pid {pid} listens on {addr}, not on loopback")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if shutil.which("ss") is None:
        print("skipped: no ss")
        return 77
    mpirun, weft = sys.argv[1], sys.argv[2]
    failures = []
    log = f"/tmp/weft-listen-{os.getpid()}.log"

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               WEFT_TIMEOUT="30")
    env.pop("WEFT_SOCKET_IFNAME", None)
    with open(log, "w") as out:
        # Open MPI's own tcp transport listens on every interface: off, so what listens is weft.
        job = subprocess.Popen([mpirun, "--oversubscribe", "--mca", "btl", "self,vader",
                                "-np", str(RANKS), weft] + BENCH,
                               env=env, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        pids = wait_for_ranks(lambda: list(rank_pids(job.pid).values()), log)
        if pids is None:
            failures.append(f"mpirun: the job did not start within {START_S} s")
        else:
            check("mpirun", pids, failures)
            os.kill(job.pid, signal.SIGUSR1)
            try:
                if job.wait(timeout=30) != 0:
                    failures.append(f"mpirun: exited {job.returncode} after SIGUSR1")
            except subprocess.TimeoutExpired:
                failures.append("mpirun: still running 30 s after SIGUSR1")
    finally:
        end_job(job)

    by_hand = dict(env, WEFT_SIZE=str(RANKS), WEFT_COORDINATOR=f"127.0.0.1:{free_port()}")
    procs = []
    with open(log, "w") as out:
        for r in range(RANKS):
            procs.append(subprocess.Popen([weft] + BENCH, env=dict(by_hand, WEFT_RANK=str(r)),
                                          stdout=out if r == 0 else subprocess.DEVNULL,
                                          stderr=subprocess.STDOUT))
    try:
        pids = wait_for_ranks(lambda: [p.pid for p in procs], log)
        if pids is None:
            failures.append(f"by hand: the job did not start within {START_S} s")
        else:
            check("WEFT_COORDINATOR=127.0.0.1", pids, failures)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        os.unlink(log)

    return report(failures)


if __name__ == "__main__":
    sys.exit(main())
