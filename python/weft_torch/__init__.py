"""weft as a torch.distributed backend.

    import weft_torch                      # registers backend "weft"
    torch.distributed.init_process_group(backend="weft")

Launch with torchrun, or with mpirun: under mpirun, RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE come from Open MPI's variables when they are not set, and MASTER_ADDR and
MASTER_PORT must be given (mpirun -x MASTER_ADDR=host -x MASTER_PORT=29500 ...), as for gloo.
The group's store carries weft's unique id from rank 0 to the others. Collectives take CPU
tensors; weft's own settings (WEFT_TIMEOUT, WEFT_TRANSPORT, ...) apply: `weft info` lists them.
"""

import os

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _C

__all__ = ["version"]


def version() -> str:
    """libweft's version, as weftGetVersion reports it: "0.1.0"."""
    v = _C.version()
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def _rank_from_open_mpi() -> None:
    """Under mpirun, fills torch.distributed's env:// variables from Open MPI's."""
    if "OMPI_COMM_WORLD_RANK" not in os.environ or "RANK" in os.environ:
        return
    for ours, theirs in (("RANK", "OMPI_COMM_WORLD_RANK"),
                         ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                         ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
                         ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        if theirs in os.environ:
            os.environ.setdefault(ours, os.environ[theirs])


def _create(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


_rank_from_open_mpi()
dist.Backend.register_backend("weft", _create, devices=["cpu"])
