#!/usr/bin/env python3
"""Two benchmark results side by side, figure by figure: the ratio NEW/OLD of every figure both
have, and a flag on each that moved by more than this machine's run-to-run noise.

    python3 tools/bench_compare.py OLD.json NEW.json [--noise bench/noise.json] [--moved]
                                   [--strict]
    python3 tools/bench_compare.py --measure-noise RUN.json RUN.json [RUN.json ...]
                                   [--how TEXT] > bench/noise.json

Both files are hal_bench --json results, or both examples/bench_step_time.py --json results.
Figures are matched by what they are (part, backend, measurement, collective, processes,
hosts, size, implementation, algorithm, unit, statistic), never by position.

The noise band of a figure comes from --noise (bench/noise.json): measured by running the same
benchmark several times back to back on this machine (--measure-noise), per family of figures
the largest max/min - 1 seen among its runs. A family is what one implementation measured at
one size, as an absolute figure or as a ratio taken within the run (part, backend,
implementation, statistic, processes, hosts, size, ratio or not): its collectives and the
times, algbw and busbw derived from one another share it. A figure moved when NEW/OLD is above
1 + band or below 1 / (1 + band); figures of a family the noise runs did not cover take the
file's default band. Wrong collective results are flagged on
any change. A moved figure is "better" or "worse" by its unit (GB/s and ratios up is better,
times down is better).

Exit status: 0 (with --strict: 1 when a figure got worse beyond its band), 2 when an input
cannot be read or the two are of different kinds.
"""

import argparse
import json
import math
import os
import sys

KEY_FIELDS = ("part", "backend", "measurement", "collective", "ranks", "hosts", "transport",
              "bytes", "implementation", "algorithm", "unit", "statistic")
FAMILY_FIELDS = ("part", "backend", "implementation", "statistic", "ranks", "hosts", "bytes",
                 "kind")
HIGHER_IS_BETTER = {"GB/s", "x", "%"}
EXACT_UNITS = {"elements"}  # wrong results: any change counts
DEFAULT_BAND = 0.25  # when no noise file is given: the upper end of what README reports


def fail(msg):
    print(f"bench_compare: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")


def kind_of(doc):
    if isinstance(doc, dict) and "figures" in doc:
        return "hal_bench"
    if isinstance(doc, dict) and "breakdown" in doc:
        return "step_time"
    return None


def figures_of(doc):
    """The figures of a result, as dicts with KEY_FIELDS and a value. A step-time result's
    figures are its per-device breakdown and its targets' measured ratios."""
    if kind_of(doc) == "hal_bench":
        return doc["figures"]
    out = []
    for device, split in doc.get("breakdown", {}).items():
        for part_name, value in split.items():
            out.append({"part": "step", "backend": device,
                        "measurement": part_name.removesuffix("_s"),
                        "implementation": "hal" if device != "cpu" else "cpu",
                        "value": value, "unit": "s", "statistic": "median"})
    for t in doc.get("targets", []):
        if t.get("measured") is not None:
            out.append({"part": "step", "measurement": t["name"], "implementation": "hal",
                        "value": t["measured"], "unit": "x", "statistic": "median"})
    return out


def key_of(fig):
    return tuple(fig.get(k) for k in KEY_FIELDS)


def family_of(fig):
    kind = "ratio" if fig["unit"] == "x" else "absolute"
    return tuple(fig.get(k) for k in FAMILY_FIELDS[:-1]) + (kind,)


def describe(fig):
    parts = [fig.get("backend") or "", fig["measurement"]]
    if fig.get("collective"):
        parts.append(f"{fig['collective']} x{fig['ranks']}")
        if (fig.get("hosts") or 1) > 1:
            parts.append(f"{fig['hosts']} hosts ({fig.get('transport')})")
    if fig.get("bytes"):
        parts.append(size_label(fig["bytes"]))
    impl = fig["implementation"] + (f" {fig['algorithm']}" if fig.get("algorithm") else "")
    parts.append(impl)
    parts.append(f"{fig['statistic']}, {fig['unit']}")
    return " | ".join(p for p in parts if p)


def size_label(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def index(doc, path):
    out = {}
    for fig in figures_of(doc):
        if fig.get("value") is None:
            continue
        k = key_of(fig)
        if k in out:
            fail(f"{path}: two figures of the same key: {describe(fig)}")
        out[k] = fig
    return out


# ---- noise --------------------------------------------------------------------------------------

def spread(values):
    """max/min - 1 over the runs (0 when the figure never changed); None when it cannot be
    formed (a zero or negative value)."""
    lo, hi = min(values), max(values)
    if lo <= 0:
        return None if hi > 0 else 0.0
    return hi / lo - 1.0


def round_up(band):
    """Four decimals, rounded up: the runs that set a band stay inside it."""
    return math.ceil(band * 1e4) / 1e4


def measure_noise(paths, how):
    docs = [load(p) for p in paths]
    kinds = {kind_of(d) for d in docs}
    if None in kinds:
        fail("--measure-noise takes hal_bench or bench_step_time results")
    runs = {}
    for doc, path in zip(docs, paths):
        for k, fig in index(doc, path).items():
            runs.setdefault(k, []).append(fig)
    families = {}
    spreads = []
    for k, figs in runs.items():
        if len(figs) < 2 or figs[0]["unit"] in EXACT_UNITS:
            continue
        s = spread([f["value"] for f in figs])
        if s is None:
            continue
        spreads.append(s)
        fam = family_of(figs[0])
        families[fam] = max(families.get(fam, 0.0), s)
    if not spreads:
        fail("the runs have no figure in common")
    spreads.sort()
    default = spreads[min(len(spreads) - 1, int(0.9 * len(spreads)))]
    machine = []
    for doc, path in zip(docs, paths):
        lines = doc.get("machine") or []
        lines = lines if isinstance(lines, list) else [lines]
        machine.append({"file": os.path.basename(path), "date": doc.get("date"),
                        "commit": doc.get("commit"), "command": doc.get("command"),
                        "other_share": [round(m.get("other_share", 0.0), 3) for m in lines]})
    return {
        "schema": "hal-bench-noise/1",
        "how": how or f"{len(paths)} runs back to back on one machine",
        "band_is": ("per figure max/min - 1 over the runs; per family (the fields of each band "
                    "below) the largest spread of its figures"),
        "runs": machine,
        "default_band": round_up(default),
        "default_band_is": "the 90th percentile of every figure's spread",
        "bands": [dict(zip(FAMILY_FIELDS, fam), band=round_up(band))
                  for fam, band in sorted(families.items(), key=lambda kv: str(kv[0]))],
    }


def load_bands(path):
    """(family -> band, default band, where from)."""
    if not path:
        return {}, DEFAULT_BAND, f"no noise file: {DEFAULT_BAND:.0%} for every figure"
    noise = load(path)
    bands = {tuple(b.get(k) for k in FAMILY_FIELDS): b["band"] for b in noise.get("bands", [])}
    default = noise.get("default_band", DEFAULT_BAND)
    return bands, default, (f"{path}: {len(bands)} families measured, {default:.0%} for the "
                            "others")


# ---- comparison ---------------------------------------------------------------------------------

def compare(old, new, bands, default):
    """Rows (figure, old, new, ratio, band, verdict) for every figure both have, and the keys
    only one has. verdict: "" (within the band), "better", "worse" or "changed"."""
    rows = []
    for k, fig in new.items():
        if k not in old:
            continue
        a, b = old[k]["value"], fig["value"]
        unit = fig["unit"]
        if unit in EXACT_UNITS:
            band = 0.0
        else:
            band = bands.get(family_of(fig), default)
        if a == b:
            ratio = 1.0
        elif a == 0:
            ratio = math.inf
        else:
            ratio = b / a
        moved = ratio > 1.0 + band or ratio < 1.0 / (1.0 + band)
        verdict = ""
        if moved:
            if unit in EXACT_UNITS:
                verdict = "worse" if b > a else "better"
            elif unit in HIGHER_IS_BETTER:
                verdict = "better" if ratio > 1 else "worse"
            elif unit in ("ns", "us", "ms", "s"):
                verdict = "better" if ratio < 1 else "worse"
            else:
                verdict = "changed"
        rows.append((fig, a, b, ratio, band, verdict))
    only_old = [old[k] for k in old if k not in new]
    only_new = [new[k] for k in new if k not in old]
    return rows, only_old, only_new


def print_report(rows, only_old, only_new, moved_only, where, out=None):
    out = out or sys.stdout
    print(f"noise band: {where}", file=out)
    width = max([len(describe(r[0])) for r in rows] + [6])
    print(f"{'figure':{width}s} {'old':>11s} {'new':>11s} {'new/old':>8s} {'band':>6s}  moved",
          file=out)
    order = {"worse": 0, "changed": 1, "better": 2, "": 3}
    for fig, a, b, ratio, band, verdict in sorted(rows, key=lambda r: (order[r[5]],
                                                                       describe(r[0]))):
        if moved_only and not verdict:
            continue
        r = "inf" if math.isinf(ratio) else f"{ratio:.3f}"
        flag = f"** {verdict.upper()}" if verdict else ""
        print(f"{describe(fig):{width}s} {a:11.4g} {b:11.4g} {r:>8s} {band:6.0%}  {flag}",
              file=out)
    worse = sum(r[5] == "worse" for r in rows)
    better = sum(r[5] == "better" for r in rows)
    changed = sum(r[5] == "changed" for r in rows)
    print(f"{len(rows)} figures compared: {worse} worse, {better} better, {changed} changed "
          f"beyond the noise band, {len(rows) - worse - better - changed} within it; "
          f"{len(only_old)} only in OLD, {len(only_new)} only in NEW", file=out)
    return worse


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help="OLD NEW, or the runs with --measure-noise")
    p.add_argument("--noise", help="the noise bands (bench/noise.json)")
    p.add_argument("--moved", action="store_true", help="print only the figures that moved")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a figure got worse beyond its band")
    p.add_argument("--measure-noise", action="store_true",
                   help="write the noise bands of several runs of one benchmark to stdout")
    p.add_argument("--how", help="with --measure-noise: how the runs were taken, for the file")
    args = p.parse_args(argv)
    if args.measure_noise:
        if len(args.files) < 2:
            p.error("--measure-noise needs at least two runs")
        noise = measure_noise(args.files, args.how)
        bands = noise.pop("bands")
        text = json.dumps(noise, indent=1)[:-2]  # the bands one a line, to keep the file short
        print(text + ',\n "bands": [\n' +
              ",\n".join("  " + json.dumps(b) for b in bands) + "\n ]\n}")
        return 0
    if len(args.files) != 2:
        p.error("give OLD and NEW")
    old_doc, new_doc = load(args.files[0]), load(args.files[1])
    if kind_of(old_doc) is None or kind_of(old_doc) != kind_of(new_doc):
        fail("OLD and NEW must both be hal_bench results or both bench_step_time results")
    for doc, path in ((old_doc, args.files[0]), (new_doc, args.files[1])):
        print(f"{'OLD' if doc is old_doc else 'NEW'}: {path}: {doc.get('date')}, commit "
              f"{doc.get('commit')}{', a --quick run' if doc.get('quick') else ''}")
    if bool(old_doc.get("quick")) != bool(new_doc.get("quick")):
        print("note: one run is --quick and the other is not: their figures are not comparable")
    bands, default, where = load_bands(args.noise)
    rows, only_old, only_new = compare(index(old_doc, args.files[0]),
                                       index(new_doc, args.files[1]), bands, default)
    worse = print_report(rows, only_old, only_new, args.moved, where)
    return 1 if args.strict and worse else 0


if __name__ == "__main__":
    sys.exit(main())
