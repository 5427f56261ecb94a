"""weft's torch.distributed collectives against gloo's, on the same tensors in the same job.

Run under mpirun or torchrun (scripts/test-torch does both). Every rank makes a weft group
(the default group, backend="weft") and a gloo group over the same ranks, then for every
dtype, size and op runs each collective through both and requires the results to be equal,
element for element. Inputs are small integers, so that every sum, product and average the
ranks form is exact in every dtype (as nccl-tests chooses them); uint8 sums also wrap.
gloo has no AVG: its reference is gloo's SUM divided as torch divides (integers toward zero).
Exits nonzero, naming the case, on the first mismatch.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

import weft_torch

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16,
          torch.int32, torch.int64, torch.uint8, torch.int8]
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def make_input(dtype, n, rank, case, op):
    g = torch.Generator().manual_seed(case * 7919 + rank)
    if op == "prod":  # products of four ranks' values stay exact
        low, high = (-2, 3) if dtype not in (torch.uint8,) else (1, 3)
    elif dtype == torch.uint8 and op == "sum":  # wraps, as C++ uint8 arithmetic does
        low, high = 0, 256
    elif dtype == torch.uint8:
        low, high = 0, 17
    else:
        low, high = -8, 9
    return torch.randint(low, high, (n,), generator=g, dtype=torch.int64).to(dtype)


def gloo_reduce(t, op, gloo, size):
    """gloo's allreduce of t in place, with AVG as SUM then torch's division."""
    if op != "avg":
        dist.all_reduce(t, OPS[op], group=gloo)
        return t
    dist.all_reduce(t, dist.ReduceOp.SUM, group=gloo)
    if t.is_floating_point():
        return t / size
    return torch.div(t, size, rounding_mode="trunc")


class Checker:
    def __init__(self, rank):
        self.rank = rank
        self.counts = {}

    def equal(self, name, got, want):
        if not torch.equal(got, want):
            diff = (got != want).nonzero()
            at = diff[0].item() if diff.numel() else -1
            sys.exit(f"collectives_vs_gloo: rank {self.rank}: {name}: weft differs from gloo at "
                     f"element {at}: weft {got.flatten()[at].item() if at >= 0 else got.shape}, "
                     f"gloo {want.flatten()[at].item() if at >= 0 else want.shape}")
        kind = name.split()[0]
        self.counts[kind] = self.counts.get(kind, 0) + 1


def expect_error(check, name, kind, words, call):
    try:
        call()
    except kind as e:
        if words not in str(e):
            sys.exit(f"collectives_vs_gloo: {name}: the {type(e).__name__} does not say "
                     f"{words!r}: {e}")
        check.counts["errors"] = check.counts.get("errors", 0) + 1
        return str(e)
    sys.exit(f"collectives_vs_gloo: {name}: expected {kind.__name__}, got no error")


def check_errors(check, rank):
    """weft's refusals reach Python as exceptions that carry weft's words. The last one, ranks
    that disagree on a call, breaks the group (as weft.h says): it comes last."""
    x = torch.ones(8, dtype=torch.int32)
    expect_error(check, "BAND", RuntimeError, "weft reduces with SUM, AVG, PRODUCT, MIN and MAX",
                 lambda: dist.all_reduce(x, dist.ReduceOp.BAND))
    expect_error(check, "int16", RuntimeError, "not supported",
                 lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)))
    expect_error(check, "non-contiguous", RuntimeError, "contiguous",
                 lambda: dist.all_reduce(torch.ones(4, 4)[:, 1]))
    dist.all_reduce(x)  # the group still works after a refused argument
    if not torch.equal(x, torch.full((8,), dist.get_world_size(), dtype=torch.int32)):
        sys.exit(f"collectives_vs_gloo: rank {rank}: allreduce after a refusal is wrong: {x}")
    said = expect_error(check, "counts that differ across ranks", dist.DistBackendError,
                        "disagree", lambda: dist.all_reduce(torch.ones(5 + rank)))
    if rank == 0:
        print(f"collectives_vs_gloo: counts that differ across ranks: {said.splitlines()[0]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,1,7,1000,65537",
                        help="element counts per rank, comma-separated")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    torch.set_num_threads(1)

    dist.init_process_group(backend="weft")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    check = Checker(rank)
    case = 0
    for dtype in DTYPES:
        for n in sizes:
            tag = f"{str(dtype).removeprefix('torch.')} n={n}"
            for op in OPS:
                case += 1
                # all_reduce (in place, as torch has it)
                x = make_input(dtype, n, rank, case, op)
                w = x.clone()
                dist.all_reduce(w, OPS[op])
                check.equal(f"all_reduce {op} {tag}", w, gloo_reduce(x.clone(), op, gloo, size))

                # reduce_scatter_tensor, out of place and in place (the output is this
                # rank's block of the input)
                full = make_input(dtype, n * size, rank, case, op)
                want = gloo_reduce(full.clone(), op, gloo, size).narrow(0, rank * n, n)
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, full.clone(), OPS[op])
                check.equal(f"reduce_scatter_tensor {op} {tag}", out, want)
                buf = full.clone()
                mine = buf.narrow(0, rank * n, n)
                dist.reduce_scatter_tensor(mine, buf, OPS[op])
                check.equal(f"reduce_scatter_tensor(in-place) {op} {tag}", mine, want)
                # The output over another rank's block of the input: not weft's in place,
                # so the backend hands weft a copy.
                buf = full.clone()
                other = buf.narrow(0, (rank + 1) % size * n, n)
                dist.reduce_scatter_tensor(other, buf, OPS[op])
                check.equal(f"reduce_scatter_tensor(overlapping) {op} {tag}", other, want)

            x = make_input(dtype, n, rank, case, "sum")
            want = [torch.empty(n, dtype=dtype) for _ in range(size)]
            dist.all_gather(want, x, group=gloo)
            want = torch.cat(want)
            # all_gather (list), all_gather_into_tensor out of place and in place
            got = [torch.full((n,), 3, dtype=dtype) for _ in range(size)]
            dist.all_gather(got, x)
            check.equal(f"all_gather {tag}", torch.cat(got), want)
            out = torch.empty(n * size, dtype=dtype)
            dist.all_gather_into_tensor(out, x)
            check.equal(f"all_gather_into_tensor {tag}", out, want)
            out = torch.zeros(n * size, dtype=dtype)
            out.narrow(0, rank * n, n).copy_(x)
            dist.all_gather_into_tensor(out, out.narrow(0, rank * n, n))
            check.equal(f"all_gather_into_tensor(in-place) {tag}", out, want)
            out = torch.zeros(n * size, dtype=dtype)
            other = out.narrow(0, (rank + 1) % size * n, n)
            other.copy_(x)
            dist.all_gather_into_tensor(out, other)
            check.equal(f"all_gather_into_tensor(overlapping) {tag}", out, want)

            for root in sorted({0, size - 1}):
                w = x.clone()
                g = x.clone()
                dist.broadcast(w, src=root)
                dist.broadcast(g, src=root, group=gloo)
                check.equal(f"broadcast root={root} {tag}", w, g)
    dist.barrier()
    check.counts["barrier"] = 1
    check_errors(check, rank)

    total = sum(check.counts.values())
    if rank == 0:
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "mpirun"
        print(f"collectives_vs_gloo: {size} ranks ({launcher}), weft {weft_torch.version()}, "
              f"torch {torch.__version__}: {total} results equal to gloo's "
              f"({', '.join(f'{k} {v}' for k, v in sorted(check.counts.items()))}); "
              f"dtypes {len(DTYPES)}, sizes {sizes}, ops {list(OPS)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
