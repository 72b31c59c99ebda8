#!/usr/bin/env python3
"""Puts torch-hal traces (HAL_LAYERS=trace) and a torch.profiler trace on one timeline.

Both are Chrome trace JSON. A HAL trace stamps events with CLOCK_MONOTONIC microseconds and
records, in "otherData", the offset from that clock to the Unix epoch
("monotonic_to_unix_epoch_us"). A torch.profiler trace (export_chrome_trace) stamps events with
Unix-epoch microseconds minus its "baseTimeNanoseconds" / 1000. This script shifts every HAL
event onto the torch trace's timeline (or, without a torch trace, all HAL traces onto a common
epoch-based one, e.g. the traces of several ranks) and writes one file that Perfetto
(ui.perfetto.dev) or chrome://tracing opens. HAL events keep their pid and tid, so the calls of a
process appear next to its torch operators, and the device-side spans on their stream tracks.

Usage:
    merge_traces.py [-o merged.json] [--torch torch_trace.json] hal-trace-*.json
    merge_traces.py [-o merged.json] torch_trace.json hal-trace-*.json

A file is recognised as a HAL trace by otherData.producer; any other file is taken as the torch
trace (at most one).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

HAL_PRODUCER = "torch-hal trace layer"


def load(path: str) -> dict:
    with open(path, "rb") as f:
        doc = json.load(f)
    if isinstance(doc, list):  # the bare-array form of the format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents array)")
    return doc


def is_hal(doc: dict) -> bool:
    other = doc.get("otherData")
    return isinstance(other, dict) and other.get("producer") == HAL_PRODUCER


def hal_offset_us(doc: dict, path: str) -> float:
    try:
        return float(doc["otherData"]["monotonic_to_unix_epoch_us"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: HAL trace without otherData.monotonic_to_unix_epoch_us")


def torch_base_us(doc: dict, path: str) -> float:
    """What to subtract from Unix-epoch microseconds to get the torch trace's ts."""
    if "baseTimeNanoseconds" in doc:
        return float(doc["baseTimeNanoseconds"]) / 1000.0
    # Older exports stamp Unix-epoch microseconds directly.
    stamps = [e["ts"] for e in doc["traceEvents"] if isinstance(e, dict) and "ts" in e]
    if stamps and min(float(t) for t in stamps) > 1e14:
        return 0.0
    raise ValueError(
        f"{path}: cannot tell the torch trace's clock (no baseTimeNanoseconds and its timestamps "
        "are not Unix-epoch microseconds)"
    )


def shift(events: list, delta: float) -> list:
    out = []
    for e in events:
        if isinstance(e, dict) and "ts" in e:
            e = dict(e)
            e["ts"] = round(float(e["ts"]) + delta, 3)
        out.append(e)
    return out


def merge(paths: list[str], torch_path: str | None = None) -> tuple[dict, int]:
    """The merged trace and how many of its events came from HAL traces."""
    docs = []
    torch_doc = None
    if torch_path:
        torch_doc = load(torch_path)
    for p in paths:
        d = load(p)
        if is_hal(d):
            docs.append((p, d))
        elif torch_doc is None:
            torch_doc, torch_path = d, p
        else:
            raise ValueError(f"{p}: a second non-HAL trace (only one torch trace can be merged)")
    if not docs:
        raise ValueError("no HAL trace given")
    if torch_doc is not None:
        base = torch_base_us(torch_doc, torch_path)
        merged = dict(torch_doc)
        events = list(torch_doc["traceEvents"])
    else:
        # Epoch microseconds, relative to the earliest HAL event (whole microseconds).
        starts = []
        for p, d in docs:
            off = hal_offset_us(d, p)
            starts += [float(e["ts"]) + off for e in d["traceEvents"] if "ts" in e]
        base = float(math.floor(min(starts))) if starts else 0.0
        merged = {"displayTimeUnit": "ms", "baseTimeNanoseconds": int(base) * 1000}
        events = []
    sources = []
    for p, d in docs:
        delta = hal_offset_us(d, p) - base
        events += shift(d["traceEvents"], delta)
        sources.append({"file": p, "pid": d["otherData"].get("pid"), "shift_us": delta})
    merged["traceEvents"] = events
    other = dict(merged.get("otherData") or {})
    other["hal_traces"] = sources
    merged["otherData"] = other
    return merged, sum(len(d["traceEvents"]) for _, d in docs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", help="HAL traces, and at most one torch.profiler trace")
    ap.add_argument("--torch", help="the torch.profiler trace (if not among TRACES)")
    ap.add_argument("-o", "--output", default="merged_trace.json", help="output file")
    args = ap.parse_args(argv)
    try:
        merged, n = merge(args.traces, args.torch)
    except (OSError, ValueError) as e:
        print(f"merge_traces: {e}", file=sys.stderr)
        return 1
    with open(args.output, "w") as f:
        json.dump(merged, f)
    print(f"merge_traces: {args.output}: {len(merged['traceEvents'])} events ({n} from HAL traces)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
