"""Fake GPUs and InfiniBand ports, one set per host, as files the ranks read.

weft's health monitor reads NVML (through the fake libnvidia-ml.so.1 of tests/fakes, which
reads the JSON file named by WEFT_FAKE_NVML_STATE) and InfiniBand ports and counters under
WEFT_IB_SYSFS_ROOT. `up --gpus G` makes, for every host hI, under the state directory:

  fake/hI/nvml.json       {"gpus": [{"bus_id": "00000000:18:00.0",
                                     "ecc": {"corrected": 0, "uncorrected": 0},
                                     "nvlinks": [{"active": true, "remote_bus_id": ...,
                                                  "crc_flit": 0, "crc_data": 0,
                                                  "replay": 0, "recovery": 0}, ...],
                                     "xids": []}, ...]}
                          G GPUs, bus ids 00000000:<0x18+g>:00.0; GPU g has one NVLink to
                          every other GPU of the host, in the order of that GPU's index
                          (no file when G is 0)
  fake/hI/sys/class/infiniband/mlx5_K/ports/1/   one port per rail K: state, phys_state,
                          rate, counters/<name>, gid_attrs/ndevs/0 (= rail K's interface)

The launch agent and `vcluster exec` export host_env() for the host they enter. Storms
(faults.py) change the counters: every change is a read-modify-write under the host's
lock (flock on fake/hI/nvml.json.lock or fake/hI/ib.lock, beside the files, never inside
the sys tree) and an atomic replace (temp file in the same folder, then os.replace), so
a reader never sees half a file and storms on one host never lose each other's updates."""

import contextlib
import json
import os
import shutil

from . import names as nm
from .state import locked

FAKE_DIR = "fake"
IB_DEVICE = "mlx5_{}"
IB_PORT = 1
FIRST_BUS = 0x18
MAX_GPUS = 16
IB_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors",
               "port_xmit_discards", "port_rcv_remote_physical_errors")
NVLINK_COUNTERS = ("crc_flit", "crc_data", "replay", "recovery")
PORT_FILES = {"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n",
              "rate": "100 Gb/sec (4X EDR)\n"}
FILE_MODE, DIR_MODE = 0o644, 0o755


# --- where things are ---------------------------------------------------------------------

def root(state):
    return state.path(FAKE_DIR)


def host_dir(state, host):
    return os.path.join(root(state), host)


def nvml_path(state, host):
    return os.path.join(host_dir(state, host), "nvml.json")


def sys_root(state, host):
    return os.path.join(host_dir(state, host), "sys")


def ib_device(rail):
    return IB_DEVICE.format(rail)


def port_dir(state, host, rail):
    return os.path.join(sys_root(state, host), "class", "infiniband", ib_device(rail),
                        "ports", str(IB_PORT))


def counter_path(state, host, rail, counter):
    return os.path.join(port_dir(state, host, rail), "counters", counter)


def bus_id(g):
    return "00000000:%02x:00.0" % (FIRST_BUS + g)


def has_devices(info):
    """False for a cluster made before fake devices existed (no "gpus" in cluster.json)."""
    return info is not None and "gpus" in info


def gpus(info):
    return info.get("gpus", 0) if info else 0


def host_env(state, info, host):
    """The variables every process on `host` gets: its sysfs root, its file of injected
    faults, and its NVML state file if the cluster has fake GPUs."""
    if not has_devices(info):
        return {}
    env = {"WEFT_IB_SYSFS_ROOT": sys_root(state, host), "WEFT_INJECT_FILE": inject_path(state, host)}
    if gpus(info):
        env["WEFT_FAKE_NVML_STATE"] = nvml_path(state, host)
    return env


# --- making and removing ------------------------------------------------------------------

def nvml_initial(n):
    return {"gpus": [
        {"bus_id": bus_id(g),
         "ecc": {"corrected": 0, "uncorrected": 0},
         "nvlinks": [dict({"active": True, "remote_bus_id": bus_id(other)},
                          **{c: 0 for c in NVLINK_COUNTERS})
                     for other in range(n) if other != g],
         "xids": []}
        for g in range(n)]}


def make(state, info):
    """Makes every host's fake devices (recorded in info first, so down removes them)."""
    state.record_made(info, "fake", root(state))
    top = root(state)
    if os.path.exists(top):
        shutil.rmtree(top)
    _mkdir(top)
    for d in (os.path.dirname(state.dir), state.dir):   # ranks need not be root to read
        with contextlib.suppress(OSError):
            os.chmod(d, os.stat(d).st_mode | 0o055)
    for i in range(info["hosts"]):
        h = nm.host_name(i)
        _mkdir(host_dir(state, h))
        if info["gpus"]:
            _write_json(nvml_path(state, h), nvml_initial(info["gpus"]))
        for k in range(info["rails"]):
            port = port_dir(state, h, k)
            for name, text in PORT_FILES.items():
                _write(os.path.join(port, name), text)
            for c in IB_COUNTERS:
                _write(os.path.join(port, "counters", c), "0\n")
            _write(os.path.join(port, "gid_attrs", "ndevs", "0"), nm.rail_if(k) + "\n")


def remove(state, path):
    """For down: removes a recorded fake tree, only if it lies in this cluster's state."""
    if os.path.realpath(path).startswith(os.path.realpath(state.dir) + os.sep):
        shutil.rmtree(path, ignore_errors=True)


def _mkdir(path):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, DIR_MODE)


def _write(path, text):
    """Atomic: a temp file in the same folder, made readable by everyone, then replaced."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        parent = folder
        missing = []
        while not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(missing):
            _mkdir(d)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _write_json(path, value):
    _write(path, json.dumps(value, indent=1) + "\n")


def _locked(lock_path, timeout=10.0):
    """A host's fake-device files, one writer at a time (storms run side by side)."""
    return locked(lock_path, timeout, FILE_MODE, "another storm holds", pause=0.01)


# --- changing counters (storms, xid) ------------------------------------------------------

def update_nvml(state, host, change):
    """Read-modify-write of host's nvml.json under its lock: change(doc) edits doc."""
    path = nvml_path(state, host)
    with _locked(path + ".lock"):
        with open(path) as f:
            doc = json.load(f)
        change(doc)
        _write_json(path, doc)


def add_ecc(state, host, gpu, n, uncorrected=False):
    def change(doc):
        doc["gpus"][gpu]["ecc"]["uncorrected" if uncorrected else "corrected"] += n
    update_nvml(state, host, change)


def add_nvlink(state, host, gpu, link, counter, n):
    def change(doc):
        doc["gpus"][gpu]["nvlinks"][link][counter] += n
    update_nvml(state, host, change)


def add_xids(state, host, gpu, xid, count):
    def change(doc):
        doc["gpus"][gpu]["xids"].extend([xid] * count)
    update_nvml(state, host, change)


def add_ib(state, host, rail, counter, n):
    path = counter_path(state, host, rail, counter)
    with _locked(os.path.join(host_dir(state, host), "ib.lock")):
        with open(path) as f:
            value = int(f.read().strip() or 0)
        _write(path, f"{value + n}\n")


# --- what status shows --------------------------------------------------------------------

def summary(state, info, host):
    """Per host: files, GPUs, IB ports and every counter that is not zero."""
    out = {"dir": host_dir(state, host), "env": host_env(state, info, host), "gpus": [],
           "ib_ports": [f"{ib_device(k)}/{IB_PORT}" for k in range(info["rails"])],
           "nonzero": {}}
    nz = out["nonzero"]
    if gpus(info):
        try:
            with open(nvml_path(state, host)) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            out["error"] = f"{nvml_path(state, host)}: {e}"
            doc = {"gpus": []}
        for g, gpu in enumerate(doc["gpus"]):
            out["gpus"].append({"gpu": g, "bus_id": gpu["bus_id"],
                                "nvlinks": len(gpu["nvlinks"])})
            for kind, v in gpu["ecc"].items():
                if v:
                    nz[f"gpu{g}.ecc.{kind}"] = v
            for n, link in enumerate(gpu["nvlinks"]):
                for c in NVLINK_COUNTERS:
                    if link.get(c):
                        nz[f"gpu{g}.nvlink{n}.{c}"] = link[c]
            if gpu["xids"]:
                nz[f"gpu{g}.xids"] = gpu["xids"]
    for k in range(info["rails"]):
        for c in IB_COUNTERS:
            try:
                with open(counter_path(state, host, k, c)) as f:
                    v = int(f.read().strip() or 0)
            except (OSError, ValueError):
                continue
            if v:
                nz[f"{ib_device(k)}.{c}"] = v
    return out


def summary_line(s):
    """One short line: '2 GPUs (bus 18,19), IB mlx5_0 mlx5_1; gpu0.ecc.corrected=40'."""
    if s["gpus"]:
        buses = ",".join(g["bus_id"].split(":")[1] for g in s["gpus"])
        text = f"{len(s['gpus'])} GPUs (bus {buses})"
    else:
        text = "no GPUs"
    text += ", IB " + " ".join(p.split("/")[0] for p in s["ib_ports"])
    if s["nonzero"]:
        shown = []
        for key, v in s["nonzero"].items():
            if isinstance(v, list):
                v = ",".join(map(str, v[:8])) + (f",...({len(v)})" if len(v) > 8 else "")
            shown.append(f"{key}={v}")
        text += "; " + " ".join(shown)
    if "error" in s:
        text += f"; {s['error']}"
    return text


def inject_path(state, host):
    """Host's WEFT_INJECT_FILE (src/inject_file.hpp): faults running jobs re-read."""
    return os.path.join(host_dir(state, host), "inject")


def write_inject_file(state, host, text):
    """Replaces host's inject file at once (rename), so a job never reads half of it."""
    path = inject_path(state, host)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
