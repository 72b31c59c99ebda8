#!/usr/bin/env python3
"""Merges the conformance suite's per-area GoogleTest JSON files into one, and writes a Markdown
summary like the harness's own (areas, failures with their messages, skip reasons, areas that
did not finish). Used by conformance/gpu/run.sh, which runs the suite one area at a time so that
a timeout costs one area's results, not all of them.

Usage: summarize.py --out-json FILE --out-md FILE --title TEXT AREA=JSON:LOG:RC [...]
  AREA  the area's name; JSON its --gtest_output file (may be missing); LOG its console output
        (for the skip reasons the harness prints); RC its exit status (124/137: timed out).
Prints the closing line "N passed, N failed, N skipped" and exits 0.
"""
import argparse
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def skip_reasons(log_path):
    """The '- N x reason' lines under 'Skip reasons:' in the harness's summary."""
    reasons = {}
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return reasons
    for block in re.findall(r"Skip reasons:\n((?:- .*\n)+)", text):
        for line in block.splitlines():
            m = re.match(r"- (\d+) x (.*)", line)
            if m:
                reasons[m.group(2)] = reasons.get(m.group(2), 0) + int(m.group(1))
    return reasons


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--title", default="cuda")
    ap.add_argument("areas", nargs="*")
    args = ap.parse_args()

    merged = {"tests": 0, "failures": 0, "disabled": 0, "errors": 0, "name": "AllTests",
              "testsuites": []}
    rows, failed, unfinished, reasons = [], [], [], {}
    totals = [0, 0, 0]
    for spec in args.areas:
        area, rest = spec.split("=", 1)
        json_path, log_path, rc = rest.rsplit(":", 2)
        for reason, n in skip_reasons(log_path).items():
            reasons[reason] = reasons.get(reason, 0) + n
        data = load(json_path)
        if data is None:
            why = "timed out" if rc in ("124", "137") else f"exit status {rc}, no results"
            unfinished.append(f"{area} ({why})")
            rows.append((area, "-", "-", "-"))
            continue
        p = f = s = 0
        for suite in data.get("testsuites", []):
            merged["testsuites"].append(suite)
            for t in suite.get("testsuite", []):
                name = f"{t.get('classname', suite.get('name'))}.{t.get('name')}"
                if t.get("failures"):
                    f += 1
                    msg = t["failures"][0].get("failure", "").strip().splitlines()
                    failed.append((name, " / ".join(x.strip() for x in msg[:6])[:600]))
                elif t.get("result") == "SKIPPED":
                    s += 1
                else:
                    p += 1
        for key in ("tests", "failures", "disabled", "errors"):
            merged[key] += int(data.get(key, 0))
        if rc not in ("0", "1"):
            unfinished.append(f"{area} (exit status {rc})")
        rows.append((area, p, f, s))
        totals[0] += p
        totals[1] += f
        totals[2] += s

    with open(args.out_json, "w") as out:
        json.dump(merged, out, indent=1)
    lines = [f"## Conformance summary: {args.title}", "",
             "| area | passed | failed | skipped |", "|---|---:|---:|---:|"]
    lines += [f"| {a} | {p} | {f} | {s} |" for a, p, f, s in rows]
    lines.append(f"| **total** | {totals[0]} | {totals[1]} | {totals[2]} |")
    if unfinished:
        lines += ["", "Areas without a complete result: " + ", ".join(unfinished)]
    if reasons:
        lines += ["", "Skip reasons:"]
        lines += [f"- {n} x {r}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])]
    if failed:
        lines += ["", "Failed:"]
        lines += [f"- {name}: {msg}" for name, msg in failed]
    closing = f"{totals[0]} passed, {totals[1]} failed, {totals[2]} skipped"
    lines += ["", closing, ""]
    with open(args.out_md, "w") as out:
        out.write("\n".join(lines))
    print(closing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
