#!/usr/bin/env python3
"""A real 2-rank job's health, live (issue 20): the endpoint serves every scope as JSON and
as Prometheus text that a Prometheus parser accepts, the two agree, and counters raised in
the fake devices while the job runs turn the right scopes FAILING, log one JSON line per
change, and come back to HEALTHY after the hysteresis.

Usage: health_endpoint.py MPIRUN WEFT_BINARY FAKE_NVML_LIBRARY

The job is `mpirun -np 2 weft bench allreduce` over tcp on loopback, with a fake NVML (two
GPUs joined by an NVLink, state in a temporary file) and a temporary InfiniBand sysfs tree
whose one port carries loopback, the ranks' only rail. Every wait is bounded; the job is
killed and the files removed on the way out, pass or fail. Exits 0 on success, 1 on failure,
77 when Python's prometheus_client is missing (scripts/setup installs it).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from job_tools import end_job, report

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")  # Debian's, under another Python
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        print("SKIP: python3-prometheus-client is missing (scripts/setup installs it)")
        sys.exit(77)

START_S = 60
CHANGE_S = 20
IB_COUNTERS = ["symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors"]


def free_port_pair():
    """A base port whose next port is free too (one per local rank)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base > 60000:
            continue
        try:
            with socket.socket() as t:
                t.bind(("127.0.0.1", base + 1))
            return base
        except OSError:
            continue
    raise RuntimeError("no two free ports in a row on 127.0.0.1")


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def make_devices(root):
    nvml = {"gpus": [
        {"bus_id": "00000000:18:00.0", "ecc": {"corrected": 0, "uncorrected": 0},
         "nvlinks": [{"active": True, "remote_bus_id": "00000000:19:00.0", "crc_flit": 0,
                      "crc_data": 0, "replay": 0, "recovery": 0}], "xids": []},
        {"bus_id": "00000000:19:00.0", "ecc": {"corrected": 0, "uncorrected": 0},
         "nvlinks": [{"active": True, "remote_bus_id": "00000000:18:00.0", "crc_flit": 0,
                      "crc_data": 0, "replay": 0, "recovery": 0}], "xids": []}]}
    write_json(os.path.join(root, "nvml.json"), nvml)
    port = os.path.join(root, "sys", "class", "infiniband", "mlx5_0", "ports", "1")
    os.makedirs(os.path.join(port, "counters"))
    os.makedirs(os.path.join(port, "gid_attrs", "ndevs"))
    for name, text in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                       ("rate", "100 Gb/sec (4X EDR)"), ("gid_attrs/ndevs/0", "lo")):
        with open(os.path.join(port, name), "w") as f:
            f.write(text + "\n")
    for c in IB_COUNTERS:
        with open(os.path.join(port, "counters", c), "w") as f:
            f.write("0\n")
    return nvml, port


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read().decode()


def states_json(port):
    doc = json.loads(get(port, "/health"))
    return {s["scope"]: s for s in doc["scopes"]}


def states_prometheus(port):
    states = {}
    for family in text_string_to_metric_families(get(port, "/metrics")):
        if family.name == "weft_health_state":
            for sample in family.samples:
                states[sample.labels["scope"]] = int(sample.value)
    return states


def wait_for(what, check, seconds):
    """Polls check() until it returns something true; returns it, or None at the deadline."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            got = check()
            if got:
                return got
        except OSError:
            pass
        time.sleep(0.2)
    print(f"timed out after {seconds} s waiting for {what}")
    return None


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    mpirun, weft, fake_nvml = sys.argv[1:]
    root = tempfile.mkdtemp(prefix="weft-health-")
    failures = []
    job = None
    try:
        nvml, ib_port = make_devices(root)
        base = free_port_pair()
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        settings = {"WEFT_TRANSPORT": "tcp", "WEFT_TIMEOUT": "60",
                    "WEFT_HEALTH_ENDPOINT": str(base), "WEFT_HEALTH_INTERVAL_MS": "100",
                    "WEFT_HEALTH_WINDOW": "1", "WEFT_HEALTH_RECOVER": "4",
                    # The states as judged: isolation would show ISOLATED over them, and
                    # hold them for its quiet time (tests/multirank/reroute_test.cc tests it).
                    "WEFT_ISOLATE": "off",
                    "WEFT_HEALTH_LOG": os.path.join(root, "changes.%r.jsonl"),
                    "WEFT_NVML_LIBRARY": fake_nvml,
                    "WEFT_FAKE_NVML_STATE": os.path.join(root, "nvml.json"),
                    "WEFT_IB_SYSFS_ROOT": os.path.join(root, "sys")}
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2"]
        for k in settings:
            cmd += ["-x", k]
        cmd += [weft, "bench", "allreduce", "-b", "64K", "-e", "64K", "-n", "100000000",
                "-w", "1", "-c", "0"]
        env.update(settings)
        print("$", " ".join(f"{k}={v}" for k, v in settings.items()), " ".join(cmd), flush=True)
        log = open(os.path.join(root, "job.log"), "w")
        job = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
        scopes = [wait_for(f"rank {r}'s endpoint to show its links",
                           lambda r=r: (lambda s: s if any(k.startswith("rail") for k in s)
                                        else None)(states_json(base + r)), START_S)
                  for r in (0, 1)]
        if None in scopes:
            with open(os.path.join(root, "job.log")) as f:
                print(f.read()[-3000:])
            return report(["an endpoint never showed the job's links"])
        for r, s in enumerate(scopes):
            print(f"rank {r} scopes: " + ", ".join(f"{k}={v['state']}" for k, v in s.items()))
            kinds = {v["kind"] for v in s.values()}
            for kind in ("link", "rail", "gpu", "nvlink", "ib_port"):
                if kind not in kinds:
                    failures.append(f"rank {r} shows no {kind} scope")
            for name, v in s.items():
                if v["state"] != "HEALTHY":
                    failures.append(f"rank {r}: {name} is {v['state']} before any fault")
        nvlinks = [k for k, v in scopes[0].items() if v["kind"] == "nvlink"]
        if nvlinks != ["nvlink 0 of gpu 0 to rank 1"]:
            failures.append(f"rank 0's NVLink does not map to rank 1: {nvlinks}")
        # The same states in both formats, and the Prometheus text parses.
        for r in (0, 1):
            js = {k: v["state"] for k, v in states_json(base + r).items()}
            prom = states_prometheus(base + r)
            names = {0: "HEALTHY", 1: "SUSPECT", 2: "FAILING", 3: "ISOLATED", 4: "PROBATION"}
            if {k: names[v] for k, v in prom.items()} != js:
                failures.append(f"rank {r}: /metrics {prom} disagrees with /health {js}")
        # Faults: XID 79 on GPU 0 (rank 0's), a symbol-error burst on the shared port.
        nvml["gpus"][0]["xids"].append(79)
        write_json(os.path.join(root, "nvml.json"), nvml)
        with open(os.path.join(ib_port, "counters", "symbol_error"), "w") as f:
            f.write("50\n")
        # The window is 1 s and the recovery 4 s: each stays FAILING at least 4 s.
        got = wait_for("rank 0's GPU and port to be FAILING", lambda: (lambda s: s if (
            s["gpu 0 (0000:18:00.0)"]["state"] == "FAILING" and
            s["ib mlx5_0 port 1 (rail 0)"]["state"] == "FAILING") else None)(
            states_json(base)), CHANGE_S)
        if got is None:
            failures.append("XID 79 and 50 symbol errors did not make rank 0's GPU and port FAILING")
        else:
            print("rank 0 after the faults:", got["gpu 0 (0000:18:00.0)"]["reason"]["text"], "|",
                  got["ib mlx5_0 port 1 (rail 0)"]["reason"]["text"])
            rank1 = states_json(base + 1)
            if rank1["gpu 1 (0000:19:00.0)"]["state"] != "HEALTHY":
                failures.append("rank 1's GPU turned unhealthy from rank 0's XID")
            prom = states_prometheus(base)
            if prom.get("gpu 0 (0000:18:00.0)") != 2:
                failures.append(f"/metrics does not show rank 0's GPU FAILING: {prom}")
        # Nothing more happens: after the window and the recovery time, all HEALTHY again.
        back = wait_for("rank 0 to be all HEALTHY again", lambda: all(
            v["state"] == "HEALTHY" for v in states_json(base).values()), CHANGE_S)
        if not back:
            failures.append("rank 0 did not come back to HEALTHY after the hysteresis")
        with open(os.path.join(root, "changes.0.jsonl")) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        print("rank 0's change log:")
        for line in lines:
            print(" ", json.dumps(line))
        wanted = {("gpu 0 (0000:18:00.0)", "FAILING", "xid_79"),
                  ("gpu 0 (0000:18:00.0)", "HEALTHY", "xid_79"),
                  ("ib mlx5_0 port 1 (rail 0)", "FAILING", "ib_symbol_error"),
                  ("ib mlx5_0 port 1 (rail 0)", "HEALTHY", "ib_symbol_error")}
        seen = {(x["scope"], x["to"], x.get("counter")) for x in lines}
        for w in wanted - seen:
            failures.append(f"no change line for {w}")
        if job.poll() is not None:
            failures.append(f"the job ended early (exit {job.returncode})")
    finally:
        if job is not None:
            end_job(job)
        shutil.rmtree(root, ignore_errors=True)
    return report(failures)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
