"""Holds two train_ddp.py runs side by side: the same losses (equal, or within --tolerance,
relative), and the time per step of each. Exits nonzero when the losses differ by more."""

import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weft")
    parser.add_argument("gloo")
    parser.add_argument("--tolerance", type=float, default=0.0,
                        help="largest relative difference allowed (0: bit for bit)")
    args = parser.parse_args()
    a, b = (json.load(open(p)) for p in (args.weft, args.gloo))
    la, lb = a["losses"], b["losses"]
    if len(la) != len(lb):
        sys.exit(f"compare_losses: {len(la)} steps against {len(lb)}")
    worst = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(la, lb))
    equal = sum(x == y for x, y in zip(la, lb))
    print(f"compare_losses: {a['ranks']} ranks, {len(la)} steps: loss {la[0]:.6f} -> "
          f"{la[-1]:.6f} (weft), {lb[0]:.6f} -> {lb[-1]:.6f} (gloo); {equal}/{len(la)} steps "
          f"equal, largest relative difference {worst:.3g}; median step "
          f"{a['median_step_seconds'] * 1e3:.2f} ms (weft), "
          f"{b['median_step_seconds'] * 1e3:.2f} ms (gloo)")
    if worst > args.tolerance:
        sys.exit(f"compare_losses: the losses differ by {worst:.3g} relative, more than "
                 f"--tolerance {args.tolerance}")


if __name__ == "__main__":
    main()
