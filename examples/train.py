#!/usr/bin/env python3
"""train.py: a data-parallel PyTorch training job over weft, launched with mpirun.

    mpirun -np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 \\
        .venv/bin/python examples/train.py --csv curve.csv

An MLP learns to classify a synthetic data set: 10 classes in 64 dimensions (the shape of
scikit-learn's digits), Gaussian clusters drawn from --seed, 8192 samples to train on and
2048 to test on. Rank r trains on its shard (every size-th sample) in batches of --batch;
DistributedDataParallel averages the gradients over weft (backend="weft"; --backend gloo
for comparison). Prints step, loss (averaged over ranks), test accuracy and time per step;
rank 0 writes the curve to --csv. At the end the ranks compare their parameters, which must
be identical bit for bit, and rank 0 writes them out (--save).

--ranks-in-one N trains in one process, without any process group, on the batches that N
ranks would take at each step joined into one: the same training, summed in another order
(cluster/train-under-faults compares the two).

--pace-ms makes each step last at least that long (sleeping the rest): it stands in for the
compute of a larger model, so that a short run spans the seconds a link fault and weft's
answer to it take.
"""

import argparse
import csv
import hashlib
import sys
import time

import torch
import torch.nn as nn

CLASSES, DIM, TRAIN, TEST = 10, 64, 8192, 2048


def dataset(seed):
    g = torch.Generator().manual_seed(seed)
    centers = 0.5 * torch.randn(CLASSES, DIM, generator=g)

    def draw(n):
        y = torch.randint(0, CLASSES, (n,), generator=g)
        return centers[y] + 1.5 * torch.randn(n, DIM, generator=g), y

    return draw(TRAIN), draw(TEST)


def batch_indices(seed, rank, size, batch, step):
    """The samples rank `rank` of `size` trains on at `step`: its shard, reshuffled every
    epoch from the seed, the epoch and the rank."""
    shard = torch.arange(rank, TRAIN, size)
    per_epoch = len(shard) // batch
    epoch, k = divmod(step, per_epoch)
    order = torch.randperm(len(shard), generator=torch.Generator().manual_seed(
        seed * 1_000_003 + epoch * 101 + rank))
    return shard[order[k * batch:(k + 1) * batch]]


def model_for(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                         nn.Linear(128, CLASSES))


def parameters_of(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--backend", default="weft", choices=["weft", "gloo"])
    p.add_argument("--ranks-in-one", type=int, default=0, metavar="N",
                   help="train in one process, as N ranks would (no process group)")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=20, help="test accuracy every N steps")
    p.add_argument("--print-every", type=int, default=50)
    p.add_argument("--pace-ms", type=float, default=0.0, help="least time per step")
    p.add_argument("--csv", help="rank 0 writes step,time_s,loss,accuracy,step_ms,work_ms "
                   "here (work_ms: the step before --pace-ms's sleep)")
    p.add_argument("--save", help="rank 0 writes the final parameters here (raw float32)")
    args = p.parse_args()
    torch.set_num_threads(1)

    (x_train, y_train), (x_test, y_test) = dataset(args.seed)
    model = model_for(args.seed)
    if args.ranks_in_one:
        rank, size, shards, dist = 0, 1, args.ranks_in_one, None
        net = model
    else:
        import torch.distributed as dist
        import weft_torch  # noqa: F401  (registers backend "weft")
        dist.init_process_group(backend=args.backend)
        rank, size = dist.get_rank(), dist.get_world_size()
        shards = size
        net = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def accuracy():
        with torch.no_grad():
            return (model(x_test).argmax(1) == y_test).float().mean().item()

    out = None
    if rank == 0 and args.csv:
        out = open(args.csv, "w", newline="")
        writer = csv.writer(out)
        writer.writerow(["step", "time_s", "loss", "accuracy", "step_ms", "work_ms"])
    start = time.perf_counter()
    for step in range(args.steps):
        began = time.perf_counter()
        mine = range(shards) if args.ranks_in_one else [rank]
        idx = torch.cat([batch_indices(args.seed, r, shards, args.batch, step) for r in mine])
        opt.zero_grad()
        loss = loss_fn(net(x_train[idx]), y_train[idx])
        loss.backward()
        opt.step()
        seen = loss.detach().clone()
        if dist is not None:  # the mean over ranks (SUM, then divided: gloo has no AVG)
            dist.all_reduce(seen)
            seen /= size
        work_ms = (time.perf_counter() - began) * 1e3
        if args.pace_ms:
            time.sleep(max(0.0, (args.pace_ms - work_ms) / 1e3))
        step_ms = (time.perf_counter() - began) * 1e3
        acc = accuracy() if (step + 1) % args.eval_every == 0 or step + 1 == args.steps else None
        if out:
            writer.writerow([step + 1, f"{time.perf_counter() - start:.4f}", f"{seen.item():.8g}",
                             "" if acc is None else f"{acc:.4f}", f"{step_ms:.3f}",
                             f"{work_ms:.3f}"])
            out.flush()
        if rank == 0 and ((step + 1) % args.print_every == 0 or step + 1 == args.steps):
            print(f"step {step + 1:5d}  loss {seen.item():.5f}  "
                  f"accuracy {accuracy():.4f}  step {step_ms:.2f} ms (work {work_ms:.2f} ms)",
                  flush=True)

    params = parameters_of(model)
    digest = hashlib.sha256(params.numpy().tobytes()).hexdigest()[:16]
    if dist is not None:
        digests = [None] * size
        dist.all_gather_object(digests, digest)
        if rank == 0:
            if len(set(digests)) != 1:
                sys.exit(f"train.py: the ranks' parameters differ: {digests}")
            print(f"train.py: parameters identical on all {size} ranks (sha256 {digest}), "
                  f"{args.steps} steps in {time.perf_counter() - start:.1f} s", flush=True)
        dist.destroy_process_group()
    else:
        print(f"train.py: one process as {shards} ranks: parameters sha256 {digest}", flush=True)
    if rank == 0 and args.save:
        params.numpy().tofile(args.save)


if __name__ == "__main__":
    main()
