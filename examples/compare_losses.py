#!/usr/bin/env python3
"""Compares the per-step losses of two runs of train_tiny_lm.py (a CPU run and a device run).

    python3 examples/compare_losses.py out/demo/cpu.json out/demo/neuron.json \\
        --plot out/demo/loss_curves.png

Prints a per-step table (step, CPU loss, device loss, absolute and relative difference), the
largest deviation, the step-time ratio device / CPU (mean over the steps after --skip-first,
so start-up and warm-up are left out), and the device run's memory statistics
(torch.<device>.memory_stats: peak allocated and reserved bytes). --plot writes a PNG with
matplotlib (Agg, no display needed; `make demo` installs it): both loss curves, and below them
the per-step difference with its largest value marked.

Exit status: 0 when every step's relative difference is within --rtol (default 1e-6; 0 asks
for bit-exact losses), 1 otherwise, 2 on unusable input or when the plot cannot be written.
"""

import argparse
import json
import math
import statistics
import sys


def load(path):
    with open(path) as f:
        log = json.load(f)
    steps = {s["step"]: s for s in log.get("steps", [])}
    if not steps:
        raise SystemExit(f"compare_losses: {path} has no steps")
    return log, steps


def fmt_bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024.0
    return str(n)


def mean_step_time(steps, skip):
    times = [s["time_s"] for k, s in sorted(steps.items()) if k > skip]
    if not times:
        times = [s["time_s"] for s in steps.values()]
    return statistics.fmean(times), statistics.median(times)


def step_differences(cpu_steps, dev_steps):
    """(step, cpu loss, device loss, absolute difference, relative difference) per common step."""
    rows = []
    for k in sorted(set(cpu_steps) & set(dev_steps)):
        a, b = cpu_steps[k]["loss"], dev_steps[k]["loss"]
        diff = abs(a - b)
        rel = diff / abs(a) if a != 0 else (0.0 if diff == 0 else math.inf)
        rows.append((k, a, b, diff, rel))
    return rows


def largest_deviation(cpu_steps, dev_steps):
    """(largest absolute difference, largest relative difference, the first step with the
    largest relative difference, or None without common steps)."""
    rows = step_differences(cpu_steps, dev_steps)
    if not rows:
        return 0.0, 0.0, None
    worst = max(rows, key=lambda r: r[4])  # max() keeps the first of equal values
    return max(r[3] for r in rows), worst[4], worst[0]


def compare(cpu_log, cpu_steps, dev_log, dev_steps, skip, rtol, out=None):
    out = out or sys.stdout  # looked up at the call, so that redirections of stdout apply
    common = sorted(set(cpu_steps) & set(dev_steps))
    cpu_name = cpu_log.get("device_type", "cpu")
    dev_name = dev_log.get("device_type", "device")
    print(f"{'step':>5}  {cpu_name + ' loss':>14}  {dev_name + ' loss':>14}  {'abs diff':>10}  "
          f"{'rel diff':>10}", file=out)
    for k, a, b, diff, rel in step_differences(cpu_steps, dev_steps):
        print(f"{k:5d}  {a:14.8f}  {b:14.8f}  {diff:10.3e}  {rel:10.3e}", file=out)
    max_abs, max_rel, worst = largest_deviation(cpu_steps, dev_steps)
    exact = max_abs == 0.0
    print(file=out)
    print(f"steps compared: {len(common)} ({cpu_name}: {len(cpu_steps)}, {dev_name}: "
          f"{len(dev_steps)})", file=out)
    verdict = "bit-exact" if exact else ("within" if max_rel <= rtol else "EXCEEDS")
    print(f"max deviation: abs {max_abs:.3e}, rel {max_rel:.3e}"
          + (f" (step {worst})" if not exact else "")
          + f"  -> {verdict}" + ("" if exact else f" rtol {rtol:g}"), file=out)
    cpu_mean, cpu_med = mean_step_time(cpu_steps, skip)
    dev_mean, dev_med = mean_step_time(dev_steps, skip)
    print(f"step time (steps > {skip}): {cpu_name} mean {cpu_mean * 1000:.1f} ms "
          f"(median {cpu_med * 1000:.1f}), {dev_name} mean {dev_mean * 1000:.1f} ms "
          f"(median {dev_med * 1000:.1f}); ratio {dev_name}/{cpu_name} "
          f"{dev_mean / cpu_mean:.2f}x (medians {dev_med / cpu_med:.2f}x)", file=out)
    mem = dev_log.get("memory")
    if mem:
        print(f"{dev_name} memory (rank 0, torch.{dev_name}.memory_stats): peak allocated "
              f"{fmt_bytes(mem.get('peak_allocated_bytes'))}, peak reserved "
              f"{fmt_bytes(mem.get('peak_reserved_bytes'))}, at the end allocated "
              f"{fmt_bytes(mem.get('allocated_bytes'))}, reserved "
              f"{fmt_bytes(mem.get('reserved_bytes'))}", file=out)
    ok = exact or max_rel <= rtol
    return ok, common


# ---- Plot ---------------------------------------------------------------------------------------

# train_tiny_lm's loss: cross-entropy (natural log) averaged over the tokens of rank 0's batch.
LOSS_UNIT = "nats/token"


def plot(path, cpu_log, cpu_steps, dev_log, dev_steps):
    """Writes a PNG (matplotlib, Agg canvas) to path: the two runs' loss per step, and below it
    the device's loss minus the CPU's at every common step, the largest deviation marked and
    stated in the figure. Raises ImportError without matplotlib, OSError if path is not
    writable."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cpu_name = cpu_log.get("device_type", "cpu")
    dev_name = dev_log.get("device_type", "device")
    rows = step_differences(cpu_steps, dev_steps)
    max_abs, max_rel, worst = largest_deviation(cpu_steps, dev_steps)

    fig = Figure(figsize=(8, 6.4), dpi=110)
    FigureCanvasAgg(fig)
    losses, delta = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.4]})
    for name, steps, style in (
            (cpu_name, cpu_steps, dict(color="tab:blue", linewidth=2.8)),
            (dev_name, dev_steps, dict(color="tab:orange", linewidth=1.3, linestyle="--"))):
        ks = sorted(steps)
        losses.plot(ks, [steps[k]["loss"] for k in ks], label=f"{name} ({len(ks)} steps)", **style)
    losses.set_title(f"train_tiny_lm: training loss per step, {dev_name} vs {cpu_name} (rank 0)")
    losses.set_ylabel(f"loss (cross-entropy, {LOSS_UNIT})")
    losses.grid(alpha=0.3)
    losses.legend(loc="upper right")

    if max_abs == 0.0:
        summary = f"largest deviation: 0 (bit-exact at all {len(rows)} common steps)"
    else:
        summary = (f"largest deviation: {max_abs:.3g} {LOSS_UNIT} absolute, {max_rel:.3g} "
                   f"relative (step {worst})")
    losses.text(0.02, 0.04, summary, transform=losses.transAxes, fontsize=9,
                bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.7"))

    ks = [r[0] for r in rows]
    delta.axhline(0.0, color="0.5", linewidth=0.8)
    delta.plot(ks, [r[2] - r[1] for r in rows], color="tab:red", marker=".", linewidth=1.0)
    if max_abs > 0.0:
        k, a, b = next(r[:3] for r in rows if r[0] == worst)
        delta.plot([k], [b - a], "o", markersize=9, markerfacecolor="none",
                   markeredgecolor="black", label=f"largest relative deviation (step {k})")
        delta.legend(loc="upper right", fontsize=8)
    else:
        delta.set_ylim(-1.0, 1.0)
    delta.set_ylabel(f"{dev_name} \u2212 {cpu_name}\n({LOSS_UNIT})")
    delta.set_xlabel("training step (optimizer steps)")
    delta.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cpu_log", help="loss log of the CPU run (train_tiny_lm.py --loss-log)")
    p.add_argument("device_log", help="loss log of the device run")
    p.add_argument("--plot", help="write a PNG of both curves here")
    p.add_argument("--skip-first", type=int, default=3,
                   help="steps left out of the step-time ratio (default 3)")
    p.add_argument("--rtol", type=float, default=1e-6,
                   help="largest relative difference accepted (default 1e-6; 0: bit-exact)")
    args = p.parse_args(argv)
    try:
        cpu_log, cpu_steps = load(args.cpu_log)
        dev_log, dev_steps = load(args.device_log)
    except (OSError, ValueError) as exc:
        print(f"compare_losses: {exc}", file=sys.stderr)
        return 2
    ok, common = compare(cpu_log, cpu_steps, dev_log, dev_steps, args.skip_first, args.rtol)
    if not common:
        print("compare_losses: the runs have no step in common", file=sys.stderr)
        return 2
    if args.plot:
        try:
            plot(args.plot, cpu_log, cpu_steps, dev_log, dev_steps)
        except ImportError as exc:
            print(f"compare_losses: --plot needs matplotlib (pip install matplotlib): {exc}",
                  file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"compare_losses: cannot write the plot: {exc}", file=sys.stderr)
            return 2
        print(f"plot: {args.plot}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
