#!/usr/bin/env python3
"""Compares the per-step losses of two runs of train_tiny_lm.py (a CPU run and a device run).

    python3 examples/compare_losses.py out/demo/cpu.json out/demo/neuron.json \\
        --plot out/demo/loss_curves.png

Prints a per-step table (step, CPU loss, device loss, absolute and relative difference), the
largest deviation, the step-time ratio device / CPU (mean over the steps after --skip-first,
so start-up and warm-up are left out), and the device run's memory statistics
(torch.<device>.memory_stats: peak allocated and reserved bytes). Writes a PNG plot of both
curves: with matplotlib when it is installed (pip install matplotlib), otherwise with the small
PNG writer in this file (zlib + struct, a 5x7 bitmap font; see write_png_plot).

Exit status: 0 when every step's relative difference is within --rtol (default 1e-6; 0 asks
for bit-exact losses), 1 otherwise, 2 on unusable input.
"""

import argparse
import json
import math
import statistics
import struct
import sys
import zlib


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


def compare(cpu_log, cpu_steps, dev_log, dev_steps, skip, rtol, out=sys.stdout):
    common = sorted(set(cpu_steps) & set(dev_steps))
    cpu_name = cpu_log.get("device_type", "cpu")
    dev_name = dev_log.get("device_type", "device")
    print(f"{'step':>5}  {cpu_name + ' loss':>14}  {dev_name + ' loss':>14}  {'abs diff':>10}  "
          f"{'rel diff':>10}", file=out)
    max_abs = max_rel = 0.0
    worst = None
    for k in common:
        a, b = cpu_steps[k]["loss"], dev_steps[k]["loss"]
        diff = abs(a - b)
        rel = diff / abs(a) if a != 0 else (0.0 if diff == 0 else math.inf)
        if rel > max_rel or worst is None:
            worst = k if rel >= max_rel else worst
        max_abs, max_rel = max(max_abs, diff), max(max_rel, rel)
        print(f"{k:5d}  {a:14.8f}  {b:14.8f}  {diff:10.3e}  {rel:10.3e}", file=out)
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

def plot_matplotlib(path, series, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    styles = [dict(color="tab:blue", linewidth=2.5), dict(color="tab:orange", linewidth=1.2,
                                                          linestyle="--")]
    for (label, xs, ys), style in zip(series, styles):
        ax.plot(xs, ys, label=label, **style)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (rank 0)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# A 5x7 bitmap font for the fallback writer: each glyph is 7 rows of 5 bits.
_FONT = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11110 00001 00001 01110 00001 00001 11110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    ".": "00000 00000 00000 00000 00000 01100 01100", "-": "00000 00000 00000 11111 00000 00000 00000",
    "/": "00001 00010 00010 00100 01000 01000 10000", " ": "00000 00000 00000 00000 00000 00000 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010", ")": "01000 00100 00010 00010 00010 00100 01000",
    ":": "00000 01100 01100 00000 01100 01100 00000", "_": "00000 00000 00000 00000 00000 00000 11111",
    "A": "01110 10001 10001 11111 10001 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11110 10001 10001 10001 10001 10001 11110",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 11001 10101 10011 10001 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 01010 00100 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
}


class _Canvas:
    def __init__(self, width, height):
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def set(self, x, y, color):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(color)

    def line(self, x0, y0, x1, y1, color, width=1):
        # Bresenham, thickened by drawing neighbours.
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        r = width // 2
        while True:
            for ox in range(-r, r + 1):
                for oy in range(-r, r + 1):
                    self.set(x0 + ox, y0 + oy, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def rect(self, x0, y0, x1, y1, color):
        for y in range(y0, y1 + 1):
            for x in range(x0, x1 + 1):
                self.set(x, y, color)

    def text(self, x, y, s, color=(0, 0, 0), scale=1):
        for ch in s.upper():
            rows = _FONT.get(ch, _FONT[" "]).split()
            for r, bits in enumerate(rows):
                for c, bit in enumerate(bits):
                    if bit == "1":
                        self.rect(x + c * scale, y + r * scale, x + c * scale + scale - 1,
                                  y + r * scale + scale - 1, color)
            x += 6 * scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_png_plot(path, series, title, width=720, height=420):
    """The fallback plot: a line chart written as an 8-bit RGB PNG without any dependency.

    PNG = signature + IHDR (size, 8-bit RGB) + IDAT (zlib of scanlines, each prefixed by filter
    byte 0) + IEND, each chunk with its CRC-32; pixels are drawn on a white canvas (Bresenham
    lines, a 5x7 bitmap font for the labels).
    """
    c = _Canvas(width, height)
    left, right, top, bottom = 76, width - 20, 40, height - 50
    xs_all = [x for _, xs, _ in series for x in xs]
    ys_all = [y for _, _, ys in series for y in ys]
    x_lo, x_hi = min(xs_all), max(xs_all)
    y_lo, y_hi = min(ys_all), max(ys_all)
    if x_hi == x_lo:
        x_hi = x_lo + 1
    pad = (y_hi - y_lo) * 0.05 or 0.05
    y_lo, y_hi = y_lo - pad, y_hi + pad

    def to_px(x, y):
        px = left + (x - x_lo) / (x_hi - x_lo) * (right - left)
        py = bottom - (y - y_lo) / (y_hi - y_lo) * (bottom - top)
        return int(round(px)), int(round(py))

    grey, black = (220, 220, 220), (0, 0, 0)
    for i in range(6):  # grid and tick labels
        y = y_lo + (y_hi - y_lo) * i / 5
        _, py = to_px(x_lo, y)
        c.line(left, py, right, py, grey)
        c.text(4, py - 3, f"{y:.4f}")
        x = round(x_lo + (x_hi - x_lo) * i / 5)
        px, _ = to_px(x, y_lo)
        c.line(px, top, px, bottom, grey)
        c.text(px - 6, bottom + 8, f"{x}")
    c.line(left, bottom, right, bottom, black)
    c.line(left, top, left, bottom, black)
    c.text(left, 12, title, scale=2)
    c.text((left + right) // 2 - 12, height - 20, "STEP")
    colors = [((31, 119, 180), 7), ((255, 127, 14), 3)]  # thick blue under thin orange
    for (label, xs, ys), (color, width_px) in zip(series, colors):
        pts = [to_px(x, y) for x, y in zip(xs, ys)]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            c.line(x0, y0, x1, y1, color, width_px)
    for i, (label, _, _) in enumerate(series):  # legend
        color = colors[i][0]
        y = top + 8 + i * 16
        c.rect(right - 150, y, right - 136, y + 8, color)
        c.text(right - 130, y + 1, label)
    with open(path, "wb") as f:
        f.write(c.png())


def plot(path, cpu_log, cpu_steps, dev_log, dev_steps, force_builtin=False):
    series = []
    for log, steps in ((cpu_log, cpu_steps), (dev_log, dev_steps)):
        ks = sorted(steps)
        series.append((log.get("device_type", "?"), ks, [steps[k]["loss"] for k in ks]))
    title = "train_tiny_lm: loss per step"
    if not force_builtin:
        try:
            plot_matplotlib(path, series, title)
            return "matplotlib"
        except ImportError:
            pass
    write_png_plot(path, series, title)
    return "built-in PNG writer"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cpu_log", help="loss log of the CPU run (train_tiny_lm.py --loss-log)")
    p.add_argument("device_log", help="loss log of the device run")
    p.add_argument("--plot", help="write a PNG of both curves here")
    p.add_argument("--skip-first", type=int, default=3,
                   help="steps left out of the step-time ratio (default 3)")
    p.add_argument("--rtol", type=float, default=1e-6,
                   help="largest relative difference accepted (default 1e-6; 0: bit-exact)")
    p.add_argument("--builtin-png", action="store_true",
                   help="use the built-in PNG writer even if matplotlib is installed")
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
        how = plot(args.plot, cpu_log, cpu_steps, dev_log, dev_steps, args.builtin_png)
        print(f"plot: {args.plot} ({how})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
