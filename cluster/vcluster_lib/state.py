"""The one directory that records what a cluster made, so `down` can undo all of it.

/run/weft-vcluster/<cluster>/ (WEFT_VCLUSTER_STATE moves the root) holds:
  cluster.json   shape, what was made (written before each thing is made), shaping
  faults.json    active faults: their iptables rules, rates, background processes
  hostfile, agent, rails.env   what mpirun and programs need (written by `up`)
  events.log     one line per fault applied or cleared, kills included
  daemons.log    output of background processes (flap, stop, counter storms)
  fake/hI/       host I's fake GPUs (nvml.json) and InfiniBand sysfs tree (devices.py)
Every read-modify-write holds `lock` (flock), so commands and daemons can run at once.
"""

import contextlib
import fcntl
import json
import os
import shutil
import time

STATE_ROOT = os.environ.get("WEFT_VCLUSTER_STATE", "/run/weft-vcluster")


@contextlib.contextmanager
def locked(lock_path, timeout, mode=0o600, holder="another process holds", pause=0.05):
    """Holds an exclusive flock on `lock_path` (made with `mode` if missing); gives up after
    `timeout` seconds with an error that names the file."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        end = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise RuntimeError(f"{holder} {lock_path} for over {timeout}s")
                time.sleep(pause)
        yield
    finally:
        os.close(fd)


class State:
    def __init__(self, cluster):
        self.name = cluster
        self.dir = os.path.join(STATE_ROOT, cluster)

    def path(self, name):
        return os.path.join(self.dir, name)

    def exists(self):
        return os.path.exists(self.path("cluster.json"))

    def lock(self, timeout=60):
        """Holds the cluster's lock; gives up after `timeout` seconds with a clear error."""
        os.makedirs(self.dir, exist_ok=True)
        return locked(self.path("lock"), timeout, 0o600, "another vcluster command holds")

    def read(self, name, default):
        try:
            with open(self.path(name)) as f:
                return json.load(f)
        except FileNotFoundError:
            return default

    def write(self, name, value):
        """Atomic: a reader sees the old file or the new one, never half of one."""
        os.makedirs(self.dir, exist_ok=True)
        tmp = self.path(name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(value, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.path(name))

    def write_text(self, name, text, mode=0o644):
        tmp = self.path(name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, self.path(name))

    def info(self):
        return self.read("cluster.json", None)

    def record_made(self, info, kind, name):
        """Write-ahead: notes a namespace or file before it is made, so an interrupted `up`
        still leaves `down` the list of what to remove."""
        info.setdefault("made", []).append({"kind": kind, "name": name})
        self.write("cluster.json", info)

    def faults(self):
        return self.read("faults.json", [])

    def set_faults(self, faults):
        self.write("faults.json", faults)

    def log_event(self, text):
        os.makedirs(self.dir, exist_ok=True)
        with open(self.path("events.log"), "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(STATE_ROOT)   # only when no other cluster is left in it
