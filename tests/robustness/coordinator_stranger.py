#!/usr/bin/env python3
"""A stranger who knows WEFT_COORDINATOR cannot join the job (issue 19, item 4).

Usage: coordinator_stranger.py WEFT_BINARY

Ranks 0-2 of a 4-rank `weft bench allreduce` start by hand (WEFT_RANK, WEFT_SIZE,
WEFT_COORDINATOR) with their user's secret file, which this test makes in a folder of its own.
A stranger then starts as rank 3 from a clean environment (`env -i`) that knows the
coordinator's address but not the secret: the job secret used to be a hash of that address,
so it was let in. It must now be refused, quickly and saying why, and the real rank 3 must
then complete the job exactly.

Loopback only; every wait is bounded; every process is killed on the way out.
Exits 0 on success, 1 on failure.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from job_tools import free_port, report

RANKS = 4
WEFT_TIMEOUT_S = 20


def start(weft, rank, env):
    cmd = [weft, "bench", "allreduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0"]
    return subprocess.Popen(cmd, env=dict(env, WEFT_RANK=str(rank)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    weft = sys.argv[1]
    home = tempfile.mkdtemp(prefix="weft-stranger-")
    job_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.join(home, "user"),
               "WEFT_SIZE": str(RANKS), "WEFT_COORDINATOR": f"127.0.0.1:{free_port()}",
               "WEFT_TIMEOUT": str(WEFT_TIMEOUT_S), "WEFT_SOCKET_IFNAME": "lo"}
    # What the stranger knows: the address, and nothing of this user's files.
    stranger_env = {"HOME": os.path.join(home, "stranger"), "WEFT_SIZE": str(RANKS),
                    "WEFT_COORDINATOR": job_env["WEFT_COORDINATOR"], "WEFT_SOCKET_IFNAME": "lo",
                    "WEFT_TIMEOUT": "5"}
    for h in (job_env["HOME"], stranger_env["HOME"]):
        os.makedirs(h)
    procs = []
    failures = []
    try:
        procs = [start(weft, r, job_env) for r in range(RANKS - 1)]
        stranger = start(weft, RANKS - 1, stranger_env)
        procs.append(stranger)
        try:
            out, _ = stranger.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stranger.kill()
            out, _ = stranger.communicate()
            failures.append("the stranger was neither admitted nor refused within 30 s")
        print("stranger (rank 3 without the secret):\n" + out)
        if stranger.returncode == 0:
            failures.append("the stranger joined the job and completed it")
        elif "could not prove it knows the job secret" not in out:
            failures.append("the stranger's error does not say that the secret was wrong")

        real = start(weft, RANKS - 1, job_env)
        procs.append(real)
        for rank, p in [(r, procs[r]) for r in range(RANKS - 1)] + [(RANKS - 1, real)]:
            try:
                out, _ = p.communicate(timeout=WEFT_TIMEOUT_S + 20)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            if p.returncode != 0:
                failures.append(f"rank {rank} of the real job exited {p.returncode}:\n{out}")
            elif rank == 0 and "Out of bounds values : 0 OK" not in out:
                failures.append(f"rank 0's table is not exact:\n{out}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(home, ignore_errors=True)
    return report(failures)


if __name__ == "__main__":
    sys.exit(main())
