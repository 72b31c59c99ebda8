#!/usr/bin/env python3
"""A few seconds of every hal_bench measurement on the cpu backend, without the collective peers
(so that the test needs neither Open MPI nor Gloo), and the --json file it writes: valid JSON,
with every part's figures, the collectives at 2 and 4 processes and across two simulated
hosts, every target with its verdict, and the machine lines.

Usage: hal_bench_smoke_test.py HAL_BENCH (run by Bazel from the runfiles tree)
"""
import json
import os
import subprocess
import sys

VERDICTS = {"met", "missed", "failed", "n/a"}


def main():
    hal_bench = sys.argv[1]
    out_dir = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or os.environ.get("TEST_TMPDIR", ".")
    path = os.path.join(out_dir, "hal_bench.json")
    proc = subprocess.run([hal_bench, "--quick", "--no-peers", f"--json={path}",
                           "--commit=smoke-test"])
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    check(proc.returncode == 0, f"hal_bench exited with {proc.returncode}")
    with open(path) as f:
        doc = json.load(f)  # fails the test when the file is not JSON
    check(doc.get("schema") == "hal-bench/1", "schema")
    check(doc.get("commit") == "smoke-test", "commit given with --commit")
    check(doc.get("quick") is True and doc.get("backends") == "cpu", "run description")
    check(len(doc.get("date", "")) == 20 and doc["date"].endswith("Z"), "UTC date")
    figures, targets = doc.get("figures", []), doc.get("targets", [])
    parts = {f["part"] for f in figures}
    check({"mem", "launch", "coll"} <= parts, f"figures of every part (have {sorted(parts)})")
    for f in figures:
        check(isinstance(f["value"], (int, float)) and f["unit"] and f["statistic"],
              f"figure with a value, unit and statistic: {f}")
    busbw = [f for f in figures if f["measurement"] == "busbw" and f["backend"] == "cpu"]
    for ranks in (2, 4):
        for hosts in (1, 2):
            rows = [f for f in busbw if f["ranks"] == ranks and f["hosts"] == hosts]
            check({f["collective"] for f in rows} ==
                  {"allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"},
                  f"busbw of every collective at {ranks} processes on {hosts} host(s)")
    cross = [f for f in busbw if f["hosts"] == 2]
    check(all(f["transport"] == "tcp" for f in cross), "simulated hosts talk over tcp")
    wrong = [f for f in figures if f["measurement"] == "wrong elements" and f["value"] != 0]
    check(not wrong, f"collective results are exact: {wrong[:3]}")
    check(any(f["implementation"] == "malloc" for f in figures), "the allocator's baseline")
    check(targets and all(t["verdict"] in VERDICTS for t in targets), "targets with verdicts")
    for t in targets:
        if t["measured"] is not None:
            check(t["threshold"] is not None and t["relation"] in ("<=", "<", ">=") and t["unit"],
                  f"a measured target has its threshold: {t['name']}")
    counted = [t for t in targets if t["verdict"] != "n/a"]
    check(doc["summary"]["targets_counted"] == len(counted), "summary counts the targets")
    machine_parts = {m["part"] for m in doc.get("machine", [])}
    check({"mem", "coll"} <= machine_parts, f"machine lines of mem and coll ({machine_parts})")
    for what in failures:
        print(f"FAILED: {what}")
    print(f"hal_bench --json: {len(figures)} figures, {len(targets)} targets; "
          f"{len(failures)} checks failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
