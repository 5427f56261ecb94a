"""A small DistributedDataParallel training: the same model, data and seed under any backend.

Run under mpirun or torchrun with --backend weft or --backend gloo; rank 0 writes the loss
of every step (averaged over ranks) and the time per step to --out as JSON. scripts/test-torch
trains under both backends and compare_losses.py holds the two runs side by side.
"""

import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

import weft_torch  # noqa: F401  (registers backend "weft")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True, choices=["weft", "gloo"])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", required=True, help="JSON file rank 0 writes")
    args = parser.parse_args()
    torch.set_num_threads(1)

    dist.init_process_group(backend=args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, 1))
    # Small buckets, so that a step makes several allreduces, as a larger model's would.
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.02)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.02, momentum=0.9)
    data = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.randn(32, 1, generator=torch.Generator().manual_seed(7)) / 32 ** 0.5

    losses, times = [], []
    for step in range(args.steps):
        x = torch.randn(64, 32, generator=data)
        y = torch.sin(x @ w_true) + 0.05 * torch.randn(64, 1, generator=data)
        start = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        # The loss every rank sees: each rank's own loss, averaged over ranks by gloo in both
        # runs, so that only the training (DDP's gradient allreduce) differs between them.
        losses.append(loss.detach())
    mean = torch.stack(losses)
    monitor = dist.new_group(backend="gloo")
    dist.all_reduce(mean, group=monitor)
    mean /= size
    if rank == 0:
        steady = sorted(times[10:])
        with open(args.out, "w") as f:
            json.dump({"backend": args.backend, "ranks": size, "steps": args.steps,
                       "torch": torch.__version__, "losses": mean.tolist(),
                       "median_step_seconds": steady[len(steady) // 2]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
