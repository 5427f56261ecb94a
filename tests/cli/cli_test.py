#!/usr/bin/env python3
"""The `weft` command's behaviour at its edges (issue 19, items 3 and 8).

Usage: cli_test.py WEFT_BINARY [--mpirun MPIRUN] [CASE_SUBSTRING ...]

Each case runs the command as a user would and checks its exit status and what it prints:
that no failure is silent, that nccl-tests' flags mean what they mean there, that help,
version and error messages say what to do. Single-rank jobs start without mpirun
(WEFT_RANK=0 WEFT_SIZE=1 WEFT_COORDINATOR on a free loopback port); multi-rank jobs start
by hand the same way, or under mpirun where a case is about the MPI launch. Every command
has a timeout, and WEFT_TIMEOUT bounds every wait inside weft. Cases that need mpirun skip
without one. Prints one line per case and "N passed, N failed, N skipped"; exits 1 if any
case failed.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

# A coordinator port below the kernel's ephemeral range, shared with the robustness scripts.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "robustness"))
from job_tools import free_port  # noqa: E402

COMMAND_TIMEOUT_S = 60  # any one command
WEFT_TIMEOUT_S = "20"   # any wait inside weft
LOOPBACK = "127.0.0.1"


class Skip(Exception):
    pass


class Failure(Exception):
    pass


def clean_env(extra=None):
    """This environment without launcher or weft settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_", "WEFT_"))
           or k == "WEFT_JOB_SECRET_FILE"}  # where scripts/test keeps the tests' secret
    env["WEFT_TIMEOUT"] = WEFT_TIMEOUT_S
    env.update(extra or {})
    return env


class Result:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __repr__(self):
        return f"exit {self.rc}\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"


def rows(text):
    """The table's rows: (size, count, type) of every line that is not a comment."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 3 and not line.startswith("#") and fields[0].isdigit():
            found.append((int(fields[0]), int(fields[1]), fields[2]))
    return found


def check(condition, what, result):
    if not condition:
        raise Failure(f"{what}\n{result!r}")


class Cli:
    def __init__(self, weft, mpirun):
        self.weft = weft
        self.mpirun = mpirun

    def solo(self, *args, env=None, stdout=None):
        """One rank, launched by hand."""
        job_env = clean_env(dict(WEFT_RANK="0", WEFT_SIZE="1",
                                 WEFT_COORDINATOR=f"{LOOPBACK}:{free_port()}", **(env or {})))
        return self.run([self.weft, *args], job_env, stdout)

    def run(self, argv, env, stdout=None):
        try:
            p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL,
                               stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=COMMAND_TIMEOUT_S, text=True)
        except subprocess.TimeoutExpired as e:
            raise Failure(f"{' '.join(argv)} ran past {COMMAND_TIMEOUT_S} s: {e.stdout} {e.stderr}")
        return Result(p.returncode, p.stdout or "", p.stderr)

    def under_mpirun(self, ranks, *args, env=None):
        if not self.mpirun:
            raise Skip("no mpirun")
        exports = []
        for key in ["WEFT_TIMEOUT", *(env or {})]:
            exports += ["-x", key]
        root = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        return self.run([self.mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(ranks),
                         *exports, self.weft, *args], clean_env(dict(root, **(env or {}))))

    def start_job(self, ranks, *args, env=None):
        """`ranks` processes launched by hand; returns them with their output collectors."""
        port = free_port()
        procs = []
        for rank in range(ranks):
            job_env = clean_env(dict(WEFT_RANK=str(rank), WEFT_SIZE=str(ranks),
                                     WEFT_COORDINATOR=f"{LOOPBACK}:{port}", **(env or {})))
            p = subprocess.Popen([self.weft, *args], env=job_env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
            procs.append(Collected(p))
        return procs


class Collected:
    """A running process whose stdout and stderr are read as they come."""

    def __init__(self, proc):
        self.proc = proc
        self.out, self.err = [], []
        self.threads = [threading.Thread(target=self._read, args=(s, b), daemon=True)
                        for s, b in ((proc.stdout, self.out), (proc.stderr, self.err))]
        for t in self.threads:
            t.start()

    def _read(self, stream, buf):
        for line in stream:
            buf.append(line)

    def wait_for(self, text, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in "".join(self.out):
                return True
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return text in "".join(self.out)

    def finish(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.err.append(f"\n(killed after {timeout} s)\n")
        for t in self.threads:
            t.join(5)
        return Result(rc, "".join(self.out), "".join(self.err))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


SETTINGS = ["WEFT_TIMEOUT", "WEFT_TRANSPORT", "WEFT_ALGORITHM", "WEFT_SOCKET_IFNAME",
            "WEFT_JOB_SECRET"]
SMALL = ["-b", "8", "-e", "8", "-n", "1", "-w", "0"]


# Item 3: no failure of the command is silent.

def test_3_forced_algorithm_is_reported(cli):
    # WEFT_ALGORITHM forces the push (two ranks only) on four: the calls fail, and the bench's
    # own sums of its results must neither fail with them nor hide why.
    r = cli.under_mpirun(4, "bench", "allreduce", "-b", "8", "-e", "1K",
                         env=dict(WEFT_ALGORITHM="allreduce=push"))
    check(r.rc == 1, "exit status 1", r)
    check("is for two ranks, not 4" in r.err, "the library's message on stderr", r)
    lines = [l for l in r.err.splitlines() if "is for two ranks" in l]
    check(all(re.search(r"rank [0-3]", l) for l in lines), "each line names its rank", r)
    check(len(lines) <= 4, "at most one line per rank", r)


def test_3_run_forced_algorithm_is_reported(cli):
    r = cli.under_mpirun(4, "run", "-b", "8", "-e", "1K",
                         env=dict(WEFT_ALGORITHM="allreduce=push"))
    check(r.rc == 1, "exit status 1", r)
    check("is for two ranks, not 4" in r.err, "the library's message on stderr", r)


def test_3_unwritable_stdout_is_reported(cli):
    with open("/dev/full", "w") as full:
        r = cli.solo("info", stdout=full)
    check(r.rc == 1, "exit status 1 when stdout cannot be written", r)
    check("stdout" in r.err, "a message naming stdout", r)


# Item 8a: -c is nccl-tests' check count in `weft run` too.

def test_8a_run_c_is_check(cli):
    r = cli.solo("run", "-c", "0", *SMALL)
    check(r.rc == 0, "exit 0", r)
    check("check iters: 0" in r.out, "-c 0 sets the check count", r)
    check(all("N/A" in l for l in r.out.splitlines() if rows(l)), "#wrong is N/A", r)


def test_8a_run_collectives_by_name(cli):
    r = cli.solo("run", "--collectives", "broadcast", *SMALL)
    check(r.rc == 0 and "# weft run: broadcast on 1 ranks" in r.out, "--collectives LIST", r)
    r = cli.solo("run", "allgather", "reduce_scatter", *SMALL)
    check(r.rc == 0 and "# weft run: allgather reduce_scatter on 1 ranks" in r.out,
          "collectives as words, as in bench", r)


def test_8a_run_c_with_names_says_where_they_went(cli):
    r = cli.solo("run", "-c", "allreduce")
    check(r.rc == 2, "exit 2", r)
    check("--collectives" in r.err, "points at --collectives", r)


# Item 8b: nccl-tests' -g (and -t) take 1.

def test_8b_g_one_is_accepted(cli):
    for flags in (["-g", "1"], ["--ngpus", "1"], ["-t", "1"], ["--nthreads", "1"]):
        r = cli.solo("bench", "allreduce", *flags, *SMALL)
        check(r.rc == 0, f"bench {' '.join(flags)} runs", r)
    r = cli.solo("run", "-g", "1", *SMALL)
    check(r.rc == 0, "run -g 1 runs", r)


def test_8b_g_more_is_refused_with_a_reason(cli):
    for flags in (["-g", "8"], ["-t", "2"]):
        r = cli.solo("bench", "allreduce", *flags)
        check(r.rc == 2 and "mpirun -np" in r.err, f"{' '.join(flags)}: says to launch ranks", r)


# Item 8c: `weft help <command>` is that command's help.

def test_8c_help_command(cli):
    for command, usage in (("bench", "weft bench <collective>"), ("run", "weft run"),
                           ("info", "usage: weft info"), ("cleanup", "usage: weft cleanup")):
        r = cli.run([cli.weft, "help", command], clean_env())
        check(r.rc == 0 and usage in r.out and "commands:" not in r.out,
              f"weft help {command} prints {command}'s help", r)
    r = cli.run([cli.weft, "help", "nosuch"], clean_env())
    check(r.rc == 2 and "nosuch" in r.err, "weft help nosuch fails naming it", r)


# Item 8d: a version.

def test_8d_version(cli):
    for flag in ("--version", "version"):
        r = cli.run([cli.weft, flag], clean_env())
        check(r.rc == 0 and re.match(r"weft \d+\.\d+\.\d+", r.out), f"weft {flag}", r)
        check(re.search(r"^mpi: ", r.out, re.M), "says whether MPI is built in", r)


# Item 8e: a size below one element is never silently a 0-byte row.

def test_8e_sizes_below_an_element(cli):
    r = cli.solo("bench", "allreduce", "-b", "1", "-e", "16", "-f", "2", "-d", "double",
                 "-n", "1", "-w", "0")
    check(r.rc == 0, "exit 0", r)
    check([s for s, _, _ in rows(r.out)] == [8, 16], "rows of 8 and 16 bytes only", r)
    check(re.search(r"^# .*raised", r.out, re.M), "the header says sizes were raised", r)


def test_8e_per_rank_sizes_below_an_element(cli):
    # allgather's size is divided by the rank count: 8 B of doubles on 2 ranks is half an
    # element each.
    procs = cli.start_job(2, "bench", "allgather", "-d", "double", *SMALL)
    results = [p.finish(COMMAND_TIMEOUT_S) for p in procs]
    r = results[0]
    check(all(x.rc == 0 for x in results), "exit 0 on both ranks", r)
    check([s for s, _, _ in rows(r.out)] == [16], "one row of 16 bytes (one double each)", r)


# Item 8f: a bad value lists what is accepted.

def test_8f_bad_values_list_the_accepted(cli):
    for args, names in ((["bench", "allreduce", "-d", "flaot"], ["int8", "bfloat16", "all"]),
                        (["run", "-d", "flaot"], ["int8", "bfloat16", "all"]),
                        (["bench", "allreduce", "-o", "summ"], ["sum", "prod", "avg", "all"]),
                        (["bench", "allreducee"], ["allgather", "reduce_scatter", "broadcast"]),
                        (["run", "--collectives", "bcast"], ["allreduce", "broadcast"]),
                        (["bench", "allreduce", "--memory", "gpu"], ["host", "device"]),
                        (["bench", "allreduce", "--compare", "ncl"], ["mpi", "health-off", "nccl"])):
        r = cli.solo(*args)
        check(r.rc == 2 and all(n in r.err for n in names),
              f"weft {' '.join(args)} lists {names}", r)


def test_8f_sizes_past_memory_are_refused(cli):
    # 2^64-1 once wrapped the buffers' rounding to one page and the bench wrote past it.
    for args in (["bench", "allreduce", "-b", "8", "-e", "18446744073709551615"],
                 ["bench", "allgather", "-b", "2G", "-e", "2048G"]):
        r = cli.solo(*args)
        check(r.rc == 2 and "lower -e" in r.err, f"weft {' '.join(args)} is refused: lower -e", r)


def test_8f_a_root_outside_the_job_is_bad_usage(cli):
    r = cli.under_mpirun(2, "bench", "broadcast", *SMALL, "-r", "5")
    check(r.rc == 2 and "-r 5 is not a rank of this 2-rank job" in r.err,
          "exit 2, naming the rank count", r)


# Item 8g: messages suggest only flags the command has.

def flags_in(text):
    return set(re.findall(r"(?<![\w-])(-[a-zA-Z]|--[a-z][a-z_-]+)\b", text))


def test_8g_run_messages_name_run_flags(cli):
    help_flags = flags_in(cli.run([cli.weft, "run", "--help"], clean_env()).out)
    for args in (["-b", "0"], ["-b", "2K", "-e", "1K"], ["-c", "allreduce"], ["-x"]):
        r = cli.solo("run", *args)
        check(r.rc == 2, f"weft run {' '.join(args)} is bad usage", r)
        foreign = flags_in(r.err) - help_flags - set(args)  # echoing the user's own is fine
        check(not foreign, f"message names flags run lacks: {sorted(foreign)}", r)


# Item 8h: the help of the jobs names the settings.

def test_8h_help_names_the_settings(cli):
    for command in ("run", "bench"):
        r = cli.run([cli.weft, command, "--help"], clean_env())
        check(r.rc == 0 and "weft info" in r.out and all(s in r.out for s in SETTINGS),
              f"weft {command} --help names weft info and {SETTINGS}", r)


# Item 8i: -N cycles.

def test_8i_cycles(cli):
    r = cli.solo("bench", "allreduce", "-b", "8", "-e", "16", "-f", "2", "-n", "1", "-w", "0",
                 "-N", "3")
    check(r.rc == 0, "exit 0", r)
    cycles = re.findall(r"^# cycle (\d+)", r.out, re.M)
    check(cycles == ["1", "2", "3"], "three cycles, each marked", r)
    check(len(rows(r.out)) == 6 and r.out.count("# Out of bounds values") == 1,
          "two rows a cycle, one footer", r)
    r = cli.solo("run", "-N", "2", *SMALL)
    check(r.rc == 0 and re.findall(r"^# cycle (\d+)", r.out, re.M) == ["1", "2"], "run -N 2", r)


def test_8i_cycles_until_a_signal(cli):
    # -N 0 runs until stopped; a SIGTERM to one rank stops every rank after the same row.
    procs = cli.start_job(2, "bench", "allreduce", *SMALL, "-N", "0")
    try:
        started = procs[0].wait_for("# cycle 3\n", COMMAND_TIMEOUT_S)
        procs[1].proc.send_signal(signal.SIGTERM)
        results = [p.finish(COMMAND_TIMEOUT_S) for p in procs]
    finally:
        for p in procs:
            p.kill()
    r = results[0]
    check(started, "reaches cycle 3", r)
    check(all(x.rc == 0 for x in results), f"both ranks exit 0: {[x.rc for x in results]}", r)
    check("# Out of bounds values : 0 OK" in r.out, "rank 0 prints the footer", r)
    check(re.search(r"^# stopped by signal", r.out, re.M), "says it was stopped", r)


def test_8i_cycles_under_mpirun_until_sigusr1(cli):
    # mpirun kills the ranks a second after it passes on SIGINT or SIGTERM, but passes
    # SIGUSR1 on and leaves the job be: the ranks end cleanly, and mpirun's status is theirs.
    if not cli.mpirun:
        raise Skip("no mpirun")
    root = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = Collected(subprocess.Popen(
        [cli.mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2", "-x", "WEFT_TIMEOUT",
         cli.weft, "bench", "allreduce", *SMALL, "-N", "0"], env=clean_env(root),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True))
    try:
        started = job.wait_for("# cycle 3\n", COMMAND_TIMEOUT_S)
        job.proc.send_signal(signal.SIGUSR1)
        r = job.finish(COMMAND_TIMEOUT_S)
    finally:
        job.kill()
    check(started, "reaches cycle 3", r)
    check(r.rc == 0, "exit 0", r)
    check("# Out of bounds values : 0 OK" in r.out, "rank 0 prints the footer", r)


def test_8i_cycles_end_on_a_failed_call(cli):
    # allgather's recursive doubling needs a power-of-two rank count: every call fails.
    procs = cli.start_job(3, "bench", "allgather", *SMALL, "-N", "0",
                          env=dict(WEFT_ALGORITHM="allgather=recursive_doubling"))
    results = [p.finish(COMMAND_TIMEOUT_S) for p in procs]
    check(all(x.rc == 1 for x in results), f"every rank exits 1: {[x.rc for x in results]}",
          results[0])
    check(all("power-of-two" in x.err for x in results), "each rank says why", results[0])


# Issue 20: the monitor's cost, side by side in one run.

def test_20_compare_health_off(cli):
    r = cli.under_mpirun(2, "bench", "allreduce", "-b", "8", "-e", "64K", "-f", "8", "-n", "5",
                         "-w", "1", "--compare", "health-off")
    check(r.rc == 0, "exit status 0", r)
    check("# health-off: out of bounds values : 0 OK" in r.out,
          "the paused monitor's columns, checked", r)
    check(len(rows(r.out)) == 5, "8 B, 64 B ... 32 KiB: five rows", r)
    table = [line.split() for line in r.out.splitlines()
             if line[:1] == " " and line.split()[0].isdigit()]
    check(len(table) == 5 and all(len(fields) == 21 for fields in table),
          "each row: both placements of both, and the ratios out of place and in place", r)


def test_20_compare_health_off_needs_the_monitor(cli):
    r = cli.under_mpirun(2, "bench", "allreduce", *SMALL, "--compare", "health-off",
                         env=dict(WEFT_HEALTH="off"))
    check(r.rc != 0, "a failure", r)
    check("unset WEFT_HEALTH=off" in r.err, "a message saying what to do", r)


# Issue 25: NCCL takes device buffers only, MPI host buffers only; either way round is bad usage.

def test_25_compare_and_memory_must_agree(cli):
    for args, says in ((["--compare", "nccl", "--memory", "host"], "drop --memory host"),
                       (["--memory", "device", "--compare", "mpi"], "drop --memory device")):
        r = cli.solo("bench", "allreduce", *args)
        check(r.rc == 2 and says in r.err, f"weft bench {' '.join(args)} is refused: {says}", r)


def probe_json(r):
    import json
    try:
        return json.loads(r.out)
    except ValueError as e:
        raise Failure(f"diag probe --json printed no JSON ({e})\n{r}")


def test_23_diag_probe_measures_every_pair(cli):
    for transport in ["shm", "tcp"]:
        r = cli.under_mpirun(3, "diag", "probe", "-b", "64K", "-r", "3", "--pings", "5",
                             "--json", env=dict(WEFT_TRANSPORT=transport))
        # Three ranks on two cores over loopback measure the scheduler as much as the links:
        # a pair may be flagged (1), which the virtual cluster's runs and the unit tests of
        # the judgement cover; here the measurement itself is what is checked.
        check(r.rc in (0, 1), f"{transport}: exit status 0 or 1", r)
        j = probe_json(r)
        check(j["schema"] == "weft.diag.probe/1" and j["ranks"] == 3, "the schema and rank count", r)
        pairs = {(c["from"], c["to"]) for c in j["cells"] if c["path"] == "link"}
        check(pairs == {(a, b) for a in range(3) for b in range(3) if a != b},
              f"{transport}: both directions of every pair", r)
        check(all(c["class"] == transport and c["bandwidth_GBps"] > 0 and c["latency_us"] > 0
                  and len(c["repeats"]) == 3 for c in j["cells"]),
              f"{transport}: every cell measured over {transport}, three repeats", r)
        check(j["verdict"] == ("healthy" if r.rc == 0 else "degraded") and
              j["unjudged_classes"] == [], "the verdict matches the exit status; classes judged", r)


def test_23_diag_probe_table_and_usage(cli):
    r = cli.under_mpirun(2, "diag", "probe", "-b", "64K", "-r", "1", "--pings", "5")
    check(r.rc == 0 and "# link: bandwidth GB/s" in r.out and "# verdict: healthy" in r.out,
          "a table and a verdict", r)
    check("fewer than 3 measurements" in r.out, "two ranks: says it cannot judge", r)
    r = cli.run([cli.weft, "diag", "probe", "--help"], clean_env())
    check(r.rc == 0 and "tournament" in r.out and "--plot" in r.out, "help", r)
    r = cli.run([cli.weft, "diag", "probe", "--repeats", "0"], clean_env())
    check(r.rc == 2 and "repeats" in r.err, "a bad value: exit 2 naming the option", r)
    r = cli.run([cli.weft, "diag"], clean_env())
    check(r.rc == 2 and "probe" in r.err, "no subcommand: exit 2 listing them", r)


class FakeHardware:
    """A fake NVML state (two GPUs, one NVLink each way) and a fake InfiniBand port whose
    rail is loopback, as the virtual cluster makes them (cluster/vcluster_lib/devices.py);
    storm() grows a counter in the background while a job runs."""

    def __init__(self, cli, tmp):
        import json
        self.json = json
        self.lib = os.path.join(os.path.dirname(cli.weft), "..", "tests", "fakes", "libnvidia-ml.so.1")
        if not os.path.exists(self.lib):
            raise Skip("no fake NVML built")
        self.state = os.path.join(tmp, "nvml.json")
        self.sys = os.path.join(tmp, "sys")
        self.gpus = [{"bus_id": f"00000000:{0x18 + g:02X}:00.0", "ecc": {"corrected": 0, "uncorrected": 0},
                      "nvlinks": [{"active": True, "remote_bus_id": f"00000000:{0x19 - g:02X}:00.0",
                                   "crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}],
                      "xids": []} for g in range(2)]
        self.write_nvml()
        port = os.path.join(self.sys, "class", "infiniband", "mlx5_0", "ports", "1")
        os.makedirs(os.path.join(port, "counters"))
        os.makedirs(os.path.join(port, "gid_attrs", "ndevs"))
        for name, text in {"state": "4: ACTIVE", "phys_state": "5: LinkUp",
                           "rate": "100 Gb/sec (4X EDR)", "gid_attrs/ndevs/0": "lo",
                           "counters/symbol_error": "0"}.items():
            with open(os.path.join(port, name), "w") as f:
                f.write(text + "\n")
        self.port = port
        self.env = dict(WEFT_NVML_LIBRARY=self.lib, WEFT_FAKE_NVML_STATE=self.state,
                        WEFT_IB_SYSFS_ROOT=self.sys, WEFT_TRANSPORT="tcp", WEFT_SOCKET_IFNAME="lo")

    def write_nvml(self):
        with open(self.state + ".tmp", "w") as f:
            self.json.dump({"gpus": self.gpus}, f)
        os.replace(self.state + ".tmp", self.state)

    def storm(self, seconds):
        """crc_flit on GPU 0's NVLink grows 1000/s for `seconds`, in a thread."""
        def grow():
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                self.gpus[0]["nvlinks"][0]["crc_flit"] += 100
                self.write_nvml()
                time.sleep(0.1)
        t = threading.Thread(target=grow, daemon=True)
        t.start()
        return t


def test_23_diag_topo_and_counters_show_the_fake_hardware(cli):
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        hw = FakeHardware(cli, tmp)
        r = cli.under_mpirun(2, "diag", "topo", "--json", env=hw.env)
        check(r.rc == 0, "topo: exit 0, every port and NVLink up", r)
        topo = json.loads(r.out)
        check(topo["schema"] == "weft.diag.topo/1", "topo: the schema", r)
        buses = sorted(g["bus_id"] for rank in topo["ranks"] for g in rank["gpus"])
        check(buses == ["0000:18:00.0", "0000:19:00.0"], "topo: each rank its fake GPU", r)
        link = topo["ranks"][0]["gpus"][0]["nvlinks"][0]
        check(link["to_rank"] == 1 and link["up"], "topo: rank 0's NVLink reaches rank 1", r)
        port = topo["ranks"][0]["ib_ports"][0]
        check((port["device"], port["state"], port["width"], port["rate_gbps"], port["rail"]) ==
              ("mlx5_0", "ACTIVE", 4, 100, 0), "topo: the fake port, its state, width, speed, rail", r)
        check(topo["pairs"][0]["path"] == "tcp over lo", "topo: the pair's path", r)
        r = cli.under_mpirun(2, "diag", "topo", env=hw.env)
        check(r.rc == 0 and "mlx5_0" in r.out and "# pairs" in r.out, "topo: the table", r)

        r = cli.under_mpirun(2, "diag", "counters", "--interval", "0.5", "--json", env=hw.env)
        check(r.rc == 0, "counters: exit 0", r)
        names = {c["name"] for rank in json.loads(r.out)["ranks"] for s in rank["scopes"]
                 for c in s["counters"]}
        for name in ["nvlink_crc_flit", "ecc_corrected", "ib_symbol_error", "tcp_retransmits",
                     "link_bytes_sent"]:
            check(name in names, f"counters: {name}", r)
        rates = [c["rate_interval"] for rank in json.loads(r.out)["ranks"] for s in rank["scopes"]
                 for c in s["counters"] if "rate_interval" in c]
        check(rates and min(rates) >= 0, "counters: a rate between the two readings, none negative", r)
        # Started by no launcher: a job of one rank, this host's GPUs and ports.
        r = cli.run([cli.weft, "diag", "counters", "--interval", "0.2", "--json"], clean_env(hw.env))
        alone = json.loads(r.out)["ranks"] if r.rc == 0 else []
        names = {c["name"] for rank in alone for s in rank["scopes"] for c in s["counters"]}
        check(len(alone) == 1 and {"ib_symbol_error", "ecc_corrected"} <= names,
              "counters alone: this host's port and GPU", r)

        with open(os.path.join(hw.port, "state"), "w") as f:
            f.write("1: DOWN\n")
        r = cli.under_mpirun(2, "diag", "topo", env=hw.env)
        check(r.rc == 1 and "DOWN" in r.out, "topo: a port down is exit 1", r)


def test_23_diag_health_reports_a_storm(cli):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        hw = FakeHardware(cli, tmp)
        r = cli.under_mpirun(2, "diag", "health", "--no-probe", env=hw.env)
        check(r.rc == 0 and "# verdict: healthy" in r.out, "no storm: healthy", r)
        storm = hw.storm(30)
        r = cli.under_mpirun(2, "diag", "health", "--no-probe", env=dict(hw.env, WEFT_HEALTH_INTERVAL_MS="100"))
        check(r.rc == 1, "a storm: exit 1", r)
        check(re.search(r"FAILING +nvlink 0 of gpu 0 .*of rank 0.*nvlink_crc_flit rate [0-9.]+/s >= 100/s",
                        r.out), "the NVLink, the counter, its rate and the threshold", r)
        del storm


def test_23_health_reads_a_running_job(cli):
    import json
    # Under mpirun, which gives each rank its local rank (and so its own port).
    if not cli.mpirun:
        raise Skip("no mpirun")
    port = free_port()
    env = clean_env(dict(WEFT_HEALTH_ENDPOINT=str(port), WEFT_TRANSPORT="tcp",
                         OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    job = subprocess.Popen([cli.mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2",
                            "-x", "WEFT_HEALTH_ENDPOINT", "-x", "WEFT_TRANSPORT", "-x", "WEFT_TIMEOUT",
                            cli.weft, "bench", "allreduce", "-b", "64K", "-e", "64K", "-N", "0",
                            "-c", "0"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            r = cli.run([cli.weft, "health", "--port", str(port), "--local", "2", "--json"], clean_env())
            if r.rc != 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        check(r.rc == 0, "a healthy job: exit 0", r)
        j = json.loads(r.out)
        check(j["schema"] == "weft.health/1" and j["answered"] == 2, "both ranks answered", r)
        check(j["epoch"] == 0 and j["ring"] == [0, 1] and j["isolated_links"] == [],
              "the route: epoch 0, ring 0 1, nothing isolated", r)
        check(all(x["route"]["rank"] == x["rank"] for x in j["ranks"]), "each rank's /route", r)
        r = cli.run([cli.weft, "health", "--port", str(port), "--local", "2", "--watch",
                     "--count", "2", "--interval", "0.2"], clean_env())
        check(r.rc == 0 and r.out.count("# weft health") == 2 and "# links" in r.out,
              "--watch --count 2: two tables", r)
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".hosts") as hostfile:
            hostfile.write("# this host, as mpirun would read it\n127.0.0.1 slots=2\n")
            hostfile.flush()
            r = cli.run([cli.weft, "health", "--port", str(port), "--hostfile", hostfile.name],
                        clean_env())
            check(r.rc == 0 and "2 of 2 ranks answered" in r.out, "--hostfile: its slots", r)
        r = cli.run([cli.weft, "health", "--port", str(port), "--local", "3"], clean_env())
        check(r.rc == 2 and "does not answer" in r.out, "a rank that does not answer: exit 2, said", r)
        check("every scope HEALTHY" not in r.out and "of the 2 ranks that answered HEALTHY" in r.out,
              "healthy only for the ranks that answered", r)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    r = cli.run([cli.weft, "health", "--local", "1"], clean_env())
    check(r.rc == 2 and "--port" in r.err, "no port: exit 2 saying which flag", r)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__)
        return 2
    weft, rest, mpirun = os.path.abspath(args[0]), args[1:], shutil.which("mpirun")
    if rest[:1] == ["--mpirun"]:
        mpirun, rest = rest[1], rest[2:]
    cli = Cli(weft, mpirun)
    cases = [(name, f) for name, f in globals().items() if name.startswith("test_")]
    cases = [(n, f) for n, f in cases if not rest or any(s in n for s in rest)]
    passed = failed = skipped = 0
    for name, case in cases:
        start = time.monotonic()
        try:
            case(cli)
            passed += 1
            print(f"PASS {name} ({time.monotonic() - start:.1f} s)", flush=True)
        except Skip as e:
            skipped += 1
            print(f"SKIP {name}: {e}", flush=True)
        except Failure as e:
            failed += 1
            print(f"FAIL {name}: {e}", flush=True)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
