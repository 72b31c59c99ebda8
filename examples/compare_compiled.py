"""Compares a device's compiled training run with the CPU's compiled and eager runs.

    python3 examples/compare_compiled.py CPU_EAGER.json CPU_COMPILED.json DEVICE_COMPILED.json

Prints the per-step losses side by side, the largest deviation of the device's compiled losses
from the CPU's compiled and eager ones, the deviation CPU Inductor itself shows against CPU
eager, and the share of the compiled graphs' aten nodes that ran as device programs (from the
device run's log). The target: the device's compiled losses stay within twice the deviation of
CPU Inductor from CPU eager (and within 1e-6 relative where that deviation is smaller), and
the share is reported. Exit status 0 when the target is met, 1 when it is missed, 2 when the
logs cannot be compared.
"""

import argparse
import json
import sys


def losses(path):
    with open(path) as f:
        log = json.load(f)
    return log, [s["loss"] for s in log["steps"]]


def largest_relative(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cpu_eager")
    p.add_argument("cpu_compiled")
    p.add_argument("device_compiled")
    args = p.parse_args()
    try:
        _, eager = losses(args.cpu_eager)
        _, inductor = losses(args.cpu_compiled)
        dev_log, dev = losses(args.device_compiled)
    except (OSError, KeyError, ValueError) as exc:
        print(f"compare_compiled: cannot read the logs: {exc}", file=sys.stderr)
        return 2
    n = min(len(eager), len(inductor), len(dev))
    if n == 0 or not (len(eager) == len(inductor) == len(dev)):
        print(f"compare_compiled: the runs have {len(eager)}, {len(inductor)} and {len(dev)} "
              "steps", file=sys.stderr)
        return 2
    name = dev_log.get("device_type", "device")
    print(f"{'step':>5} {'cpu eager':>12} {'cpu compiled':>14} {name + ' compiled':>16}")
    for i in range(n):
        print(f"{i + 1:5d} {eager[i]:12.6f} {inductor[i]:14.6f} {dev[i]:16.6f}")
    inductor_dev = largest_relative(inductor, eager)
    vs_eager = largest_relative(dev, eager)
    vs_inductor = largest_relative(dev, inductor)
    bound = max(2 * inductor_dev, 1e-6)
    print(f"largest relative deviation: cpu compiled vs cpu eager {inductor_dev:.3e}; "
          f"{name} compiled vs cpu eager {vs_eager:.3e}, vs cpu compiled {vs_inductor:.3e}")
    share = dev_log.get("device_programs")
    if share:
        draws, replays = share.get("draws", 0), share.get("replays", 0)
        masks = []
        if draws > replays:
            masks.append(f"{draws - replays} drawn")
        if replays:
            masks.append(f"{replays} replayed (the forward's draws, where kept)")
        drawn = (f"; dropout masks outside the programs: {', '.join(masks)}" if masks else "")
        print(f"aten nodes run as device programs: {share['lowered']}/{share['total']} "
              f"({100.0 * share['lowered'] / max(share['total'], 1):.1f}%){drawn}")
        for line in share.get("graphs", []):
            print(f"  {line}")
    else:
        print("aten nodes run as device programs: none reported (the run lowered no graph)")
    met = vs_eager <= bound
    print(f"target: {name} compiled vs cpu eager <= max(2 x {inductor_dev:.3e}, 1e-6) = "
          f"{bound:.3e}: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
