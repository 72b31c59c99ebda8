#!/usr/bin/env python3
"""The benchmark report: one static HTML page (plots embedded as PNG, no server, no scripts)
from hal_bench's --json file and examples/bench_step_time.py's, and a Markdown table of the
targets on stdout (for bench/README.md).

    python3 tools/bench_report.py [--bench out/bench/hal_bench.json]
                                  [--step-time out/bench/step_time.json]
                                  [--out out/bench/report.html] [--screenshot PNG]

Plots: bus bandwidth and time per operation against message size for each collective and
process count (one line per implementation and backend, log-log, the single-thread memcpy
ceiling drawn), scaling (2 against 4 processes, one host against two simulated hosts), copy
bandwidth and allocator pair times against their baselines, and the training step split per
device. Each input may be missing or partial (one part, no peers): a plot without its figures
says why in its place. --screenshot also takes a picture of the whole page with headless
Chromium (Debian's chromium package), as a browser shows it. Exit status 0 when the page (and
the picture) was written, 1 when the picture could not be taken, 2 on a usage error.
"""

import argparse
import base64
import html
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")  # no display: draw into memory
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
VERDICT_TEXT = {"met": "met", "missed": "MISSED", "failed": "MISSED (no result)", "n/a": "n/a"}


# ---- inputs ------------------------------------------------------------------------------------

def load(path, what):
    """(document, None) or (None, why it is absent)."""
    if not path:
        return None, f"no {what} file was given"
    try:
        with open(path) as f:
            return json.load(f), None
    except FileNotFoundError:
        return None, f"no {what} results ({path} does not exist)"
    except (OSError, ValueError) as e:
        return None, f"the {what} results could not be read ({path}: {e})"


def size_label(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def series_label(f):
    """What a line of a collective plot is: the implementation, with its backend, algorithm
    and hosts where they matter."""
    impl = f["implementation"]
    if f.get("algorithm"):
        impl = f"{impl} {f['algorithm'].replace('_', '-')}"
    if f.get("backend"):
        where = f["backend"]
        if (f.get("hosts") or 1) > 1:
            where += f", {f.get('transport') or 'tcp'}, {f['hosts']} simulated hosts"
        impl = f"{impl} ({where})"
    return impl


# ---- drawing -----------------------------------------------------------------------------------

class Plot:
    """One figure of the page: a PNG, or the reason it could not be drawn."""

    def __init__(self, title, png=None, why=None, notes=()):
        self.title, self.png, self.why, self.notes = title, png, why, list(notes)


DPI = 80  # pixels per inch of the plots (a 3-panel row is 15 inches wide)


def png_of(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)  # constrained layout already fits the figure
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def size_panel(ax, sizes, title, ylabel, log_y, xlabel="message size (nccl-tests' S)"):
    """Finishes a panel whose x axis is a size: log 2, ticked at the sizes measured (those
    closer than 8x to the previous tick left out, so that labels do not overlap); y log or from
    0; title, labels, grid and legend."""
    ax.set_xscale("log", base=2)
    ticks = []
    for v in sorted(set(sizes)):
        if not ticks or v >= 8 * ticks[-1]:
            ticks.append(v)
    ax.set_xticks(ticks, [size_label(v) for v in ticks], fontsize=7)
    if log_y:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.minorticks_off()  # after the scales: minor tick labels cost most of the drawing time
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6)


def grid_of(n):
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.6 * rows), squeeze=False,
                             layout="constrained")
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat


def coll_figures(bench, measurement):
    return [f for f in (bench or {}).get("figures", [])
            if f["part"] == "coll" and f["measurement"] == measurement]


def memcpy_ceiling(bench):
    for f in (bench or {}).get("figures", []):
        if f["implementation"] == "memcpy" and f["part"] == "coll" and f["statistic"] == "median":
            return f
    return None


def series_colors(bench):
    """One colour per line label, the same in every collective plot."""
    labels = sorted({series_label(f) for f in (bench or {}).get("figures", [])
                     if f["part"] == "coll" and f["implementation"] != "memcpy"})
    palette = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def collective_plots(bench, why_absent, measurement, unit, title):
    """One figure per process count: a panel per collective, a line per implementation."""
    figs = [f for f in coll_figures(bench, measurement) if (f.get("hosts") or 1) == 1]
    if not figs:
        return [Plot(title, why=why_absent or "part coll did not run in this hal_bench run")]
    peers = any(f["implementation"] in ("Open MPI", "Gloo") for f in figs)
    ceiling = memcpy_ceiling(bench) if measurement == "busbw" else None
    colors = series_colors(bench)
    plots = []
    for ranks in sorted({f["ranks"] for f in figs}):
        at = [f for f in figs if f["ranks"] == ranks]
        colls = [c for c in COLLECTIVES if any(f["collective"] == c for f in at)]
        fig, axes = grid_of(len(colls))
        for ax, coll in zip(axes, colls):
            rows = [f for f in at if f["collective"] == coll and f["value"] > 0]
            for label in sorted({series_label(f) for f in rows}):
                pts = sorted((f["bytes"], f["value"]) for f in rows if series_label(f) == label)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                        label=label, color=colors.get(label))
            if ceiling:
                ax.axhline(ceiling["value"], color="black", linestyle="--", linewidth=1,
                           label=f"memcpy, 1 thread ({ceiling['value']:.1f} GB/s)")
            size_panel(ax, [f["bytes"] for f in at], coll, f"{measurement} ({unit})", log_y=True)
        fig.suptitle(f"{title}, {ranks} processes", fontsize=10)
        notes = [] if peers else ["Open MPI and Gloo were not measured in this run "
                                  "(--no-peers, or not installed): HAL lines only"]
        if measurement == "busbw" and not ceiling:
            notes.append("no memcpy baseline in this run: the ceiling is not drawn")
        plots.append(Plot(f"{title}, {ranks} processes", png_of(fig), notes=notes))
    return plots


def scaling_plot(bench, why_absent):
    title = "Scaling: 2 against 4 processes, one host against two simulated hosts (busbw)"
    figs = [f for f in coll_figures(bench, "busbw") if f.get("backend") and f["value"] > 0]
    if not figs:
        return Plot(title, why=why_absent or "part coll did not run in this hal_bench run")
    # The backend measured across simulated hosts (the cpu backend), else the first one.
    cross = [f for f in figs if (f.get("hosts") or 1) > 1]
    backend = (cross or figs)[0]["backend"]
    figs = [f for f in figs if f["backend"] == backend and f["implementation"] in ("hal",
                                                                                    "hal native")]
    ranks = sorted({f["ranks"] for f in figs})
    hosts = sorted({f.get("hosts") or 1 for f in figs})
    if len(ranks) < 2 and len(hosts) < 2:
        return Plot(title, why=f"only {ranks[0]} processes on one host were measured "
                               "(hal_bench --ranks with one count, and --no-cross-host or no cpu "
                               "backend): nothing to compare")
    colls = [c for c in COLLECTIVES if any(f["collective"] == c for f in figs)]
    fig, axes = grid_of(len(colls))
    for ax, coll in zip(axes, colls):
        for n in ranks:
            for h in hosts:
                pts = sorted((f["bytes"], f["value"]) for f in figs if f["collective"] == coll
                             and f["ranks"] == n and (f.get("hosts") or 1) == h)
                if not pts:
                    continue
                where = "one host (shared memory)" if h == 1 else f"{h} simulated hosts (tcp)"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                        linestyle="-" if h == 1 else "--", label=f"{n} processes, {where}")
        size_panel(ax, [f["bytes"] for f in figs], coll, "busbw (GB/s)", log_y=True)
    fig.suptitle(f"hal on the {backend} backend: {title.split(': ', 1)[1]}", fontsize=10)
    notes = []
    if len(hosts) < 2:
        notes.append("no run across simulated hosts (--no-cross-host, or no cpu backend)")
    if len(ranks) < 2:
        notes.append(f"one process count only ({ranks[0]})")
    return Plot(title, png_of(fig), notes=notes)


def mem_figures(bench, measurement_prefix, parts=("mem",)):
    return [f for f in (bench or {}).get("figures", [])
            if f["part"] in parts and f["measurement"].startswith(measurement_prefix)]


def allocator_plot(bench, why_absent):
    title = "Caching allocator: alloc + free pair against malloc + free"
    figs = [f for f in mem_figures(bench, "allocator pair") if f["value"] > 0]
    if not figs:
        return Plot(title, why=why_absent or "part mem did not run in this hal_bench run")
    backends = sorted({f["backend"] for f in figs})
    fig, axes = grid_of(len(backends))
    for ax, backend in zip(axes, backends):
        for impl, label in (("hal", "hal_allocator_alloc + free"), ("malloc", "malloc + free")):
            pts = sorted((f["bytes"], f["value"]) for f in figs
                         if f["backend"] == backend and f["implementation"] == impl)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=4,
                    label=label)
        target = next((t for t in bench.get("targets", []) if t["backend"] == backend and
                       "pair <=" in t["name"] and t["threshold"] is not None), None)
        if target:
            ax.axhline(target["threshold"], color="black", linestyle="--", linewidth=1,
                       label=f"target <= {target['threshold']:g} ns")
        size_panel(ax, [f["bytes"] for f in figs], f"{backend} backend", "ns per pair (median)",
                   log_y=False, xlabel="allocation size")
    return Plot(title, png_of(fig))


def copy_plot(bench, why_absent):
    title = "Copy bandwidth: hal_memcpy_async against memcpy (raw CUDA on the cuda backend)"
    figs = [f for f in mem_figures(bench, "copy ", parts=("mem", "cuda"))
            if f["unit"] == "GB/s" and f["value"] > 0]
    if not figs:
        return Plot(title, why=why_absent or "neither part mem nor part cuda ran in this "
                    "hal_bench run")
    backends = sorted({f["backend"] for f in figs})
    fig, axes = grid_of(len(backends))
    for ax, backend in zip(axes, backends):
        at = [f for f in figs if f["backend"] == backend]
        baselines = sorted({f["implementation"] for f in at} - {"hal"})  # memcpy, CUDA
        for m in sorted({f["measurement"] for f in at}):
            what = m[len("copy "):]
            for impl in ["hal"] + baselines:
                pts = sorted((f["bytes"], f["value"]) for f in at
                             if f["measurement"] == m and f["implementation"] == impl)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                            linestyle="-" if impl == "hal" else ":",
                            label=f"hal: {what}" if impl == "hal" else f"{impl} (beside {what})")
        size_panel(ax, [f["bytes"] for f in at], f"{backend} backend", "GB/s (median)",
                   log_y=False, xlabel="copy size")
    return Plot(title, png_of(fig))


def step_plot(step, why_absent):
    title = "Training step per device: compute, fallback, copies"
    split = (step or {}).get("breakdown")
    if not split:
        return Plot(title, why=why_absent or "the step-time results have no per-device "
                    "breakdown (written by an older examples/bench_step_time.py)")
    devices = list(split)
    names = {"cpu": "cpu (plain PyTorch)", "hal": "hal (cpu backend)",
             "neuron": "neuron (trainium backend)"}
    fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
    bottom = [0.0] * len(devices)
    for key, label in (("compute_s", "compute (CPU kernels)"),
                       ("fallback_s", "fallback (the bridge's per-operator cost)"),
                       ("copies_s", "copies (staging through host memory)")):
        ms = [split[d].get(key, 0.0) * 1000 for d in devices]
        ax.bar([names.get(d, d) for d in devices], ms, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, ms)]
    for i, d in enumerate(devices):
        ax.text(i, bottom[i], f"{split[d]['step_s'] * 1000:.1f} ms", ha="center",
                va="bottom", fontsize=8)
    ax.set_ylabel("ms per step (median)", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    notes = []
    if step.get("quick"):
        notes.append("a --quick step-time run: indicative figures only")
    return Plot(title, png_of(fig), notes=notes)


def op_cost_plot(step, why_absent):
    title = "Per-operator cost: a trivial operator on hal against plain CPU"
    cost = (step or {}).get("op_cost_us")
    if not cost:
        return Plot(title, why=why_absent or "the step-time results have no per-operator cost "
                    "(written by an older examples/bench_step_time.py)")
    fig, ax = plt.subplots(figsize=(5, 3), layout="constrained")
    labels = ["cpu (plain PyTorch)", "hal (cpu backend)"]
    values = [cost["cpu"], cost["hal"]]
    ax.bar(labels, values, color=["#888888", "#1f77b4"])
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.2f} us", ha="center", va="bottom", fontsize=8)
    limit = cost["cpu"] + cost["target"]
    ax.axhline(limit, linestyle="--", color="#d62728", linewidth=1,
               label=f"target: cpu + {cost['target']:.2f} us")
    ax.set_ylabel("us per torch.add of 8 elements", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    notes = [f"hal adds {cost['added']:.2f} us to every operator (dispatch, the CPU fallback, "
             "stream ordering, the output's wrapping)"]
    return Plot(title, png_of(fig), notes=notes)


# ---- the page ----------------------------------------------------------------------------------

def all_targets(bench, step):
    return list((bench or {}).get("targets", [])) + list((step or {}).get("targets", []))


def number(v, unit):
    """Three significant digits (no exponent from 1000 up), with the unit."""
    if v is None:
        return ""
    text = f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return f"{text}x" if unit == "x" else f"{text} {unit}"


def markdown_targets(targets):
    lines = ["| part | target | measured | threshold | verdict |", "|---|---|---:|---:|---|"]
    for t in targets:
        measured = number(t.get("measured"), t.get("unit") or "") or t.get("detail") or ""
        threshold = (f"{t.get('relation', '')} {number(t.get('threshold'), t.get('unit') or '')}"
                     if t.get("threshold") is not None else "")
        verdict = VERDICT_TEXT.get(t["verdict"], t["verdict"])
        lines.append(f"| {t['part']} | {t['name']} | {measured} | {threshold} | "
                     f"{'**' + verdict + '**' if verdict.startswith('MISSED') else verdict} |")
    return "\n".join(lines)


def machine_rows(bench, step):
    rows = list((bench or {}).get("machine", []))
    if step and step.get("machine"):
        rows.append(step["machine"])
    return rows


def page(bench, bench_why, step, step_why, plots):
    e = html.escape
    head = bench or step or {}
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<title>hal-bench report</title><style>",
           "body{font-family:sans-serif;margin:1.5em;max-width:1200px;color:#222}",
           "table{border-collapse:collapse;font-size:13px;margin:.5em 0}",
           "td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}",
           "td.num{text-align:right}.met{color:#176e1b}.missed{color:#b00020;font-weight:bold}",
           ".why{border:1px dashed #999;padding:1em;color:#555;background:#f7f7f7}",
           ".note{color:#555;font-size:13px}.warn{color:#b00020}img{max-width:100%}",
           "</style></head><body>", "<h1>hal-bench report</h1>"]
    out.append("<table>")
    for key, value in (("date (UTC)", head.get("date")), ("commit", head.get("commit")),
                       ("command", (bench or {}).get("command")),
                       ("backends", (bench or {}).get("backends"))):
        out.append(f"<tr><th>{e(key)}</th><td>{e(str(value) if value else 'not recorded')}"
                   "</td></tr>")
    if step:
        out.append(f"<tr><th>step time</th><td>{e(str(step.get('date')))}, commit "
                   f"{e(str(step.get('commit')))}, {step.get('steps')} steps after "
                   f"{step.get('warmup')}</td></tr>")
    out.append("</table>")
    if (bench or {}).get("quick") or (step or {}).get("quick"):
        out.append("<p class=\"warn\">A --quick run: every figure is indicative only.</p>")
    for why in (bench_why, step_why):
        if why:
            out.append(f"<p class=\"note\">{e(why)}.</p>")

    out.append("<h2>Machine</h2>")
    rows = machine_rows(bench, step)
    if rows:
        out.append("<table><tr><th>part</th><th>backend</th><th>CPUs</th><th>wall s</th>"
                   "<th>this benchmark CPU-s</th><th>other processes CPU-s</th>"
                   "<th>steal s</th><th>share of the machine elsewhere</th><th></th></tr>")
        for m in rows:
            quiet = m.get("quiet")
            out.append(f"<tr><td>{e(m['part'])}</td><td>{e(m.get('backend') or 'all')}</td>"
                       f"<td class=\"num\">{m['cpus']}</td>"
                       f"<td class=\"num\">{m['wall_s']:.1f}</td>"
                       f"<td class=\"num\">{m['self_cpu_s']:.1f}</td>"
                       f"<td class=\"num\">{m['other_cpu_s']:.1f}</td>"
                       f"<td class=\"num\">{m['steal_s']:.1f}</td>"
                       f"<td class=\"num\">{100 * m['other_share']:.0f}%</td>"
                       f"<td class=\"{'met' if quiet else 'missed'}\">"
                       f"{'quiet' if quiet else 'busy: figures likely low and noisy'}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class=\"why\">No machine lines in these results.</p>")

    targets = all_targets(bench, step)
    if targets:
        met = sum(t["verdict"] == "met" for t in targets)
        counted = sum(t["verdict"] != "n/a" for t in targets)
        out.append(f"<p><b>{met} of {counted} targets met</b> (n/a: not counted); every target "
                   "is in the table below the plots.</p>")
    out.append("<h2>Plots</h2>")
    for p in plots:
        out.append(f"<h3>{e(p.title)}</h3>")
        if p.png:
            out.append(f"<img alt=\"{e(p.title)}\" src=\"data:image/png;base64,{p.png}\">")
        else:
            out.append(f"<p class=\"why\">Not drawn: {e(p.why)}.</p>")
        for n in p.notes:
            out.append(f"<p class=\"note\">{e(n)}.</p>")
    out.append("<h2>Targets</h2>")
    if targets:
        out.append("<table><tr><th>part</th><th>target</th><th>measured</th><th>threshold</th>"
                   "<th>verdict</th><th>detail</th></tr>")
        for t in targets:
            verdict = VERDICT_TEXT.get(t["verdict"], t["verdict"])
            cls = "met" if t["verdict"] == "met" else "missed" if verdict.startswith("MISSED") \
                else ""
            threshold = (f"{t.get('relation', '')} {number(t['threshold'], t.get('unit') or '')}"
                         if t.get("threshold") is not None else "")
            out.append(f"<tr><td>{e(t['part'])}</td><td>{e(t['name'])}</td>"
                       f"<td class=\"num\">{e(number(t.get('measured'), t.get('unit') or ''))}"
                       f"</td><td class=\"num\">{e(threshold)}</td>"
                       f"<td class=\"{cls}\">{e(verdict)}</td>"
                       f"<td>{e(t.get('detail') or '')}</td></tr>")
        out.append("</table>")
    else:
        out.append("<p class=\"why\">No targets in these results.</p>")

    out.append("</body></html>")
    return "\n".join(out) + "\n"


def screenshot(html_path, png_path, width=1280):
    """A picture of the whole page in headless Chromium, cut below its last line and stored
    with a 256-colour palette (the plots' flat colours survive it; the file is a fraction of
    the size). Returns None, or why it could not be taken."""
    from PIL import Image, ImageOps  # Pillow: a dependency of matplotlib

    browser = next((b for b in ("chromium", "chromium-browser") if shutil.which(b)), None)
    if not browser:
        return "no chromium to take the picture with (apt-get install chromium)"
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "page.png")
        for height in (8000, 16000):  # a window taller than the page: the page, whole
            cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
                   f"--screenshot={raw}", "file://" + os.path.abspath(html_path)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            except subprocess.TimeoutExpired:
                return f"{browser} took more than 180 s"
            if proc.returncode != 0 or not os.path.exists(raw):
                return f"{browser} failed (exit {proc.returncode}): {proc.stderr[-500:]}"
            with Image.open(raw) as im:
                page = im.convert("RGB")
            box = ImageOps.invert(page.convert("L")).getbbox()  # where anything is not white
            bottom = box[3] if box else 1
            if bottom < height - 1:
                break
        page.crop((0, 0, width, min(bottom + 16, height))).quantize(colors=256).save(
            png_path, optimize=True)
    return None


def build(bench_path, step_path):
    """The page's HTML and the targets' Markdown table."""
    bench, bench_why = load(bench_path, "hal_bench")
    step, step_why = load(step_path, "training-step")
    plots = (collective_plots(bench, bench_why, "busbw", "GB/s",
                              "Bus bandwidth against message size") +
             collective_plots(bench, bench_why, "time", "us",
                              "Time per operation against message size") +
             [scaling_plot(bench, bench_why), copy_plot(bench, bench_why),
              allocator_plot(bench, bench_why),
              step_plot(step, step_why and f"{step_why}: examples/bench_step_time.py did not "
                        "write it (make bench BENCH_STEP_TIME=0 leaves it out)"),
              op_cost_plot(step, step_why and f"{step_why}: examples/bench_step_time.py did "
                           "not write it (make bench BENCH_STEP_TIME=0 leaves it out)")])
    return page(bench, bench_why, step, step_why, plots), markdown_targets(all_targets(bench,
                                                                                       step))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", default="out/bench/hal_bench.json", help="hal_bench --json file")
    p.add_argument("--step-time", default="out/bench/step_time.json",
                   help="examples/bench_step_time.py --json file")
    p.add_argument("--out", default="out/bench/report.html", help="the page to write")
    p.add_argument("--screenshot", metavar="PNG",
                   help="also take a picture of the page with headless Chromium")
    args = p.parse_args(argv)
    text, table = build(args.bench, args.step_time)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(table)
    print(f"report: {args.out}", file=sys.stderr)
    if args.screenshot:
        why = screenshot(args.out, args.screenshot)
        if why:
            print(f"bench_report: no screenshot: {why}", file=sys.stderr)
            return 1
        print(f"screenshot: {args.screenshot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
