#!/usr/bin/env python3
"""Strangers with `nc` cannot disturb a running weft job (issue 4).

Usage: nc_strangers.py WEFT_BINARY

Starts a real 4-rank `weft bench allreduce` over tcp on loopback, launched by hand with
WEFT_RANK / WEFT_SIZE / WEFT_COORDINATOR, and while it runs points `nc` at its rendezvous
and at its ranks' tcp listeners:
  - garbage bytes;
  - a hello for another job: the rendezvous refuses it, and its refusal names the job id it
    serves (the id is no secret), which is what a real attacker would learn;
  - a hello forged with that job id but without WEFT_JOB_SECRET, and a made-up proof;
  - a connection that stays silent until the job ends.
Then the job must finish with exit 0 and no wrong values, and weft must have logged each
refusal (the silent connections in the summary each listener prints as it closes).
Ranks 0-2 start first; rank 3 starts only once every tcp listener has refused its
strangers, so that the rendezvous still listens and no rank has made its tcp links yet
(links are made lazily inside the first collective; a listener serves its queue at all
times, from a thread of its own). The lower rank of a link dials, so nobody may dial rank 0:
its listener refuses even the forged hello before any proof.

Everything talks to 127.0.0.1 only; every wait has a timeout; every process this script
starts is killed on the way out (also on SIGTERM/SIGINT, and by the kernel if this script
dies first). Exits 0 on success, 1 on failure, 77 (skip) when nc or ss is missing.
"""

import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
RANKS = 4
LATE_RANK = RANKS - 1
LOOPBACK = "127.0.0.1"
DEADLINE_S = 90  # the whole test; ctest's TIMEOUT is above it
WEFT_TIMEOUT_S = 30  # ranks 0-2 wait this long at most for rank 3 in the rendezvous

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wire_constant(header, name):
    """A constant of weft's own headers, so that a version bump never leaves this test's
    forged hellos behind (they would be refused for their version, not for their proof)."""
    with open(os.path.join(SOURCE, header), encoding="utf-8") as f:
        found = re.search(rf"\b{name} = (\w+);", f.read())
    if found is None:
        raise SystemExit(f"nc_strangers: no {name} in {header}")
    return int(found.group(1), 0)


# The wire formats, as src/bootstrap_wire.hpp and transport/tcp/handshake.hpp describe them.
RENDEZVOUS_VERSION = wire_constant("src/bootstrap_wire.hpp", "kProtocolVersion")
TCP_MAGIC = wire_constant("transport/tcp/handshake.hpp", "kHandshakeMagic")
TCP_VERSION = wire_constant("transport/tcp/handshake.hpp", "kHandshakeVersion")
CHALLENGE_CODE = 0x43484C47
PROOF_BYTES = 32
CHALLENGE_BYTES = 8 + 16 + PROOF_BYTES  # header, the server's nonce, the server's proof
GARBAGE = b"GET / HTTP/1.0\r\nHost: weft\r\n\r\n" + b"\xde\xad\xbe\xef" * 16


class Failure(Exception):
    pass


LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent():
    # Runs in each child before exec: SIGKILL it if this script dies without cleaning up.
    LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_loopback_port():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def rendezvous_hello(job_id, rank, size):
    # "WEFT" u16 version u16 0 u64 job u32 rank u32 size u32 blob_len u8[16] nonce; no blob.
    return b"WEFT" + struct.pack("<HHQIII", RENDEZVOUS_VERSION, 0, job_id, rank, size, 0) + \
        secrets.token_bytes(16)


def tcp_hello(job_id, from_rank, to_rank, size):
    # u32 magic, u32 version, u64 job, u32 from, u32 to, u32 size, u32 verdict (0: hello),
    # u32 socket, u32 socket count (two per rail, data and control: transport/tcp/pair.hpp), nonce.
    return struct.pack("<IIQIIIIII", TCP_MAGIC, TCP_VERSION, job_id, from_rank, to_rank, size, 0,
                       0, 2) + secrets.token_bytes(16)


class Job:
    """The processes this script starts, their logs, and their cleanup."""

    def __init__(self, weft, workdir):
        self.weft = weft
        self.workdir = workdir
        self.ranks = {}
        self.strangers = []
        self.port = free_loopback_port()
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_", "WEFT_"))}
        self.env.update(WEFT_SIZE=str(RANKS), WEFT_COORDINATOR=f"{LOOPBACK}:{self.port}",
                        WEFT_SOCKET_IFNAME="lo", WEFT_TRANSPORT="tcp",
                        WEFT_TIMEOUT=str(WEFT_TIMEOUT_S), WEFT_JOB_SECRET=secrets.token_hex(16))

    def log(self, rank, stream):
        return os.path.join(self.workdir, f"rank{rank}.{stream}")

    def start_rank(self, rank):
        with open(self.log(rank, "out"), "wb") as out, open(self.log(rank, "err"), "wb") as err:
            self.ranks[rank] = subprocess.Popen(
                [self.weft, "bench", "allreduce", "-b", "8", "-e", "64K", "-f", "8", "-c", "1",
                 "-n", "2", "-w", "1"],
                env=dict(self.env, WEFT_RANK=str(rank)), stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, start_new_session=True, preexec_fn=die_with_parent)

    def listeners(self, rank):
        """The ip:port of every listening TCP socket of `rank`'s process."""
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=10).stdout
        pid = f"pid={self.ranks[rank].pid},"
        return [line.split()[3] for line in out.splitlines() if pid in line]

    def ask(self, port, data):
        """One nc exchange: sends `data`, closes its side, returns what came back."""
        r = subprocess.run(["nc", "-n", "-N", "-w", "5", LOOPBACK, str(port)], input=data,
                           capture_output=True, timeout=15, preexec_fn=die_with_parent)
        return r.stdout

    def linger(self, port, data):
        """An nc connection that sends `data` and then stays until the job ends."""
        p = subprocess.Popen(["nc", "-n", LOOPBACK, str(port)], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, preexec_fn=die_with_parent)
        if data:
            p.stdin.write(data)
            p.stdin.flush()
        self.strangers.append(p)

    def kill_all(self):
        for p in list(self.ranks.values()) + self.strangers:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def wait_until(what, deadline, check, job):
    while True:
        for rank, p in job.ranks.items():
            if p.poll() is not None:
                raise Failure(f"rank {rank} exited with {p.returncode} while waiting for {what}")
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"timed out waiting for {what}")
        time.sleep(0.05)


def read(path):
    with open(path, "rb") as f:
        return f.read().decode(errors="replace")


def expect(text, pattern, where, what):
    found = re.search(pattern, text)
    if not found:
        raise Failure(f"{where} does not show {what} (no match for /{pattern}/)")
    line = text[text.rfind("\n", 0, found.start()) + 1:].split("\n", 1)[0]
    print(f"nc_strangers: {what}: ok, {where} says:\n    {line}")


def run(job):
    deadline = time.monotonic() + DEADLINE_S
    for rank in range(RANKS):
        if rank != LATE_RANK:
            job.start_rank(rank)

    # Rank 0 holds the rendezvous; every rank two tcp listeners: its data links' and shrink's
    # control listener. Both get every stranger, and both refuse them at once.
    rendezvous = f"{LOOPBACK}:{job.port}"
    wait_until("the rendezvous and every tcp listener", deadline, lambda: all(
        len(job.listeners(r)) == (3 if r == 0 else 2) for r in job.ranks), job)
    tcp_port = {}
    for rank in job.ranks:
        for addr in job.listeners(rank):
            if not addr.startswith(LOOPBACK + ":"):
                raise Failure(f"rank {rank} listens on {addr}; told WEFT_SOCKET_IFNAME=lo, it "
                              f"must listen on {LOOPBACK} only")
            if addr != rendezvous:
                tcp_port.setdefault(rank, []).append(int(addr.rsplit(":", 1)[1]))
    print(f"nc_strangers: rendezvous at {rendezvous}, tcp listeners at ports {tcp_port}")

    # The rendezvous: garbage, another job's hello, a forged hello with a made-up proof.
    job.ask(job.port, GARBAGE)
    reply = job.ask(job.port, rendezvous_hello(0, LATE_RANK, RANKS))
    served = re.search(rb"serves job ([0-9a-f]{16})", reply)
    if not served:
        raise Failure(f"the rendezvous answered another job's hello with {reply[:80]!r}, "
                      f"not a refusal naming its job")
    job_id = int(served.group(1), 16)
    print(f"nc_strangers: the rendezvous refused another job's hello; it serves job {job_id:016x}")
    challenge = job.ask(job.port, rendezvous_hello(job_id, LATE_RANK, RANKS) +
                        bytes(PROOF_BYTES))
    if challenge[:8] != b"WEFT" + struct.pack("<I", CHALLENGE_CODE) or len(challenge) != CHALLENGE_BYTES:
        raise Failure(f"a forged hello got {challenge[:64]!r} instead of just a challenge")
    job.linger(job.port, b"")

    # Every tcp listener: garbage, a hello forged as rank 0 with a made-up proof, silence.
    strays = [GARBAGE, None, b""]
    for rank, ports in tcp_port.items():
        strays[1] = tcp_hello(job_id, 0, rank, RANKS) + bytes(PROOF_BYTES)
        for port in ports:
            for data in strays:
                job.linger(port, data)
    # nc sends on its own time: rank 3 starts the links only once every listener has refused
    # its strangers, else the job could be done before a stranger arrives.
    wait_until("every tcp listener to refuse its strangers", deadline, lambda: all(
        re.search(rf"tcp: rank {rank} \({LOOPBACK}:{port}\): closed a connection from .* not a "
                  rf"weft tcp hello", read(job.log(rank, "err"))) and
        re.search(rf"tcp: rank {rank} \({LOOPBACK}:{port}\): (rejected|refused) a tcp connection",
                  read(job.log(rank, "err")))
        for rank, ports in tcp_port.items() for port in ports), job)

    job.start_rank(LATE_RANK)
    for rank, p in job.ranks.items():
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise Failure(f"rank {rank} did not finish within {DEADLINE_S} s")
    codes = {rank: p.returncode for rank, p in job.ranks.items()}
    if any(codes.values()):
        raise Failure(f"exit codes by rank: {codes}")
    print("nc_strangers: every rank exited 0")

    expect(read(job.log(0, "out")), r"# Out of bounds values : 0 OK", "rank 0's bench report",
           "no wrong values")
    rendezvous_log = read(job.log(0, "err"))
    expect(rendezvous_log, r"rendezvous .*: ignored a connection from .*: not a weft hello",
           "rank 0's log", "the rendezvous dropped the garbage")
    expect(rendezvous_log, r"rendezvous .*: refused rank 3 .* brought job id 0000000000000000",
           "rank 0's log", "the rendezvous refused another job's hello")
    expect(rendezvous_log, r"rendezvous .*: ignored a connection from .*: its proof of the job "
           r"secret is wrong", "rank 0's log", "the rendezvous refused the forged hello")
    for rank in tcp_port:
        log = read(job.log(rank, "err"))
        expect(log, rf"tcp: rank {rank} \(.*\): closed a connection from .* not a weft tcp hello",
               f"rank {rank}'s log", "the tcp listener dropped the garbage")
        refused = (r"rejected a tcp connection from .* claiming rank 0: rank 0 should not dial"
                   if rank == 0 else r"refused a tcp connection from .* claiming rank 0: its "
                   r"proof of the job secret is wrong")
        expect(log, rf"tcp: rank {rank} \(.*\): {refused}", f"rank {rank}'s log",
               "the tcp listener refused the forged hello")
        expect(log, rf"tcp: rank {rank} \(.*\): refused \d+ connections? in [0-9.]+ s: .*silent",
               f"rank {rank}'s log", "the tcp listener counted the silent stranger")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    missing = [tool for tool in ("nc", "ss") if shutil.which(tool) is None]
    if missing:
        print(f"nc_strangers: SKIP: {' and '.join(missing)} not installed (scripts/setup)")
        return SKIP

    def stop(signum, frame):
        raise Failure(f"stopped by signal {signum}")

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    workdir = tempfile.mkdtemp(prefix="weft-nc-strangers-")
    job = Job(os.path.abspath(sys.argv[1]), workdir)
    try:
        run(job)
        print("nc_strangers: PASS: the job ignored every stranger and logged each refusal")
        return 0
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"nc_strangers: FAIL: {e}")
        for name in sorted(os.listdir(workdir)):
            print(f"---- {name} ----\n{read(os.path.join(workdir, name))[-4000:]}")
        return 1
    finally:
        job.kill_all()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
