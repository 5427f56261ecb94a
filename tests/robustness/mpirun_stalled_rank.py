#!/usr/bin/env python3
"""A stalled rank under mpirun ends the whole job within the deadline (issue 19, item 1).

Usage: mpirun_stalled_rank.py MPIRUN WEFT_BINARY

Starts `mpirun -np 4 weft bench allreduce` (1 MiB, far more iterations than it can finish),
waits until the ranks are timing, then stops rank 2 with SIGSTOP. Every survivor's call
must fail at WEFT_TIMEOUT, and then mpirun must return, nonzero, within WEFT_TIMEOUT + 10 s
of the stop: a rank that saw its call fail must not wait in MPI_Finalize for a rank that
will never get there. The survivors' messages must say what failed, and name rank 2 as the
rank that stopped answering (item 6), not a neighbour that merely gave up.

Everything runs on this machine; every wait is bounded; mpirun and its ranks are killed on
the way out, the stopped one included, pass or fail. Exits 0 on success, 1 on failure.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from job_tools import end_job, rank_pids, report

RANKS = 4
VICTIM = 2
WEFT_TIMEOUT_S = 5
ALLOWED_S = WEFT_TIMEOUT_S + 10  # what the issue allows after the stop
START_S = 60  # for the job to start timing


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    mpirun, weft = sys.argv[1], sys.argv[2]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    log = tempfile.NamedTemporaryFile(prefix="weft-stall-", suffix=".log", delete=False)
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(RANKS),
           "-x", f"WEFT_TIMEOUT={WEFT_TIMEOUT_S}", weft, "bench", "allreduce",
           "-b", "1M", "-e", "1M", "-n", "1000000", "-w", "1"]
    print("$", " ".join(cmd), flush=True)
    job = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    victim = None
    try:
        # Timing has begun once rank 0 has printed the columns and every rank is up.
        start = time.monotonic()
        while time.monotonic() - start < START_S and job.poll() is None:
            with open(log.name) as f:
                started = "(elements)" in f.read()
            ranks = rank_pids(job.pid)
            if started and len(ranks) == RANKS:
                victim = ranks[VICTIM]
                break
            time.sleep(0.2)
        if victim is None:
            print(f"FAIL: the job did not start timing within {START_S} s")
            return 1
        time.sleep(1)
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        print(f"stopped rank {VICTIM} (pid {victim})", flush=True)
        try:
            rc = job.wait(timeout=ALLOWED_S + 20)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.monotonic() - stopped_at
        with open(log.name) as f:
            output = f.read()
        print(output[-3000:])
        failures = []
        if rc is None or took > ALLOWED_S:
            failures.append(f"mpirun took {took:.1f} s after the stop (allowed {ALLOWED_S} s)")
        if rc == 0:
            failures.append("mpirun exited 0 although calls failed")
        if "DEADLINE_EXCEEDED" not in output and "UNAVAILABLE" not in output:
            failures.append("no survivor said why its call failed")
        # Blame: a survivor that printed its error names the stopped rank, not a neighbour
        # that only gave up (mpirun may end a survivor before it prints: those say nothing).
        survivor_lines = [line for line in output.splitlines()
                          if (m := re.match(r"weft bench: rank (\d+): ", line)) and
                          int(m.group(1)) != VICTIM]
        if not survivor_lines:
            failures.append("no survivor printed its error")
        for line in survivor_lines:
            if f"rank {VICTIM} stopped answering" not in line:
                failures.append(f"a survivor blames another rank: {line}")
        print(f"mpirun returned {rc} {took:.1f} s after rank {VICTIM} was stopped")
        return report(failures)
    finally:
        # Pass or fail, nothing is left, the stopped rank included.
        end_job(job, [victim] if victim is not None else [])
        os.unlink(log.name)


if __name__ == "__main__":
    sys.exit(main())
