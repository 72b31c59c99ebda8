#!/usr/bin/env python3
"""Runs train_cuda_style.py under torchrun on an unpatched and a patched copy of torch.

    python3 patches/acceptance/run_acceptance.py [--device hal] [--markdown]

Both copies are private copies of the installed torch (the system's is not modified); the
series is applied to one of them. Each run is ``python -m torch.distributed.run --standalone
--nproc-per-node auto train_cuda_style.py --device DEVICE``. A feature's cell is the worst result
over the ranks. Exit status 0 when every feature passes on the patched copy. A feature that
failed where no c10d backend is registered for the device is marked ``[c10d]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent / "tools"
sys.path.insert(0, str(TOOLS))
import run_tests  # noqa: E402
sys.path.insert(0, str(HERE.parent.parent / "tools"))
import junit  # noqa: E402
import torchcopy  # noqa: E402

SCRIPT = HERE / "train_cuda_style.py"
RANK_ORDER = ("error", "FAIL", "skip", "pass")


def default_device() -> str:
    code = "import torch_hal; print(torch_hal.device_type() or '')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return r.stdout.strip() or "hal"


def run_copy(copy_root: Path, device: str, out: Path, timeout: int, nproc: str) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    env = torchcopy.python_env(copy_root, {"OMP_NUM_THREADS": "1"})
    cmd = [torchcopy.python_executable(copy_root), "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", str(SCRIPT), "--device", device,
           "--json-dir", str(out), "--work-dir", str(work)]
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        log = r.stdout + r.stderr
        rc = r.returncode
    except subprocess.TimeoutExpired:
        log, rc = "timeout", -1
    (out / "log.txt").write_text(log)
    ranks = sorted(out.glob("rank*.json"))
    if not ranks:
        return {"_run": {"status": f"error: torchrun exited {rc} without results", "log": log[-3000:]}}
    merged: dict[str, dict] = {}
    for f in ranks:
        data = json.loads(f.read_text())
        for name, entry in data["features"].items():
            cur = merged.get(name)
            kind = entry["status"].split(":")[0]
            if cur is None or RANK_ORDER.index(kind) < RANK_ORDER.index(cur["status"].split(":")[0]):
                merged[name] = dict(entry, rank=data["meta"]["rank"])
    merged["_meta"] = {"ranks": len(ranks), "torch_file": data["meta"]["torch_file"]}
    return merged


def short(status: str, width: int = 70) -> str:
    return status if len(status) <= width else status[: width - 3] + "..."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", help="device string (default: torch_hal's device type)")
    ap.add_argument("--nproc-per-node", default="auto")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--junit", type=Path, help="also write the patched results as JUnit XML here")
    args = ap.parse_args(argv)
    device = args.device or default_device()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="halpatch-acceptance-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        unpatched, patched = run_tests.prepare_copies(workdir)
        res_u = run_copy(unpatched, device, workdir / "run-unpatched", args.timeout, args.nproc_per_node)
        res_p = run_copy(patched, device, workdir / "run-patched", args.timeout, args.nproc_per_node)
    finally:
        if args.keep:
            print(f"work directory kept: {workdir}")
        elif args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    names = [n for n in res_p if not n.startswith("_")] or [n for n in res_u if not n.startswith("_")]
    for n in ("_run",):
        for label, res in (("unpatched", res_u), ("patched", res_p)):
            if n in res:
                print(f"{label}: {res[n]['status']}\n{res[n].get('log', '')}")
    ok = "_run" not in res_p
    rows = []
    cases = []
    for n in names:
        u = res_u.get(n, {"status": "missing"})
        p = res_p.get(n, {"status": "missing"})
        mark = " [c10d]" if p.get("blocked_by") else ""
        if p["status"] != "pass":
            ok = False
        rows.append((n, short(u["status"]), short(p["status"]) + mark))
        cases.append(junit.Case(f"patched: {n}", "pass" if p["status"] == "pass" else "fail",
                                "" if p["status"] == "pass" else
                                p["status"] + "\n" + p.get("traceback", "")))
    if "_run" in res_p:
        cases.append(junit.Case("patched: run", "fail", res_p["_run"]["status"] + "\n"
                                + res_p["_run"].get("log", "")))
    if args.junit:
        junit.write(args.junit, "patches-acceptance", cases)
    ranks = res_p.get("_meta", {}).get("ranks", "?")
    if args.markdown:
        print(f"| feature (`--device {device}`, {ranks} ranks) | unpatched 2.13.0 | patched |")
        print("|---|---|---|")
        for n, u, p in rows:
            print(f"| {n} | {u} | {p} |")
    else:
        w = max(len(n) for n, *_ in rows)
        wu = max(len(u) for _, u, _ in rows)
        print(f"{'feature':<{w}}  {'unpatched 2.13.0':<{wu}}  patched   (--device {device}, {ranks} ranks)")
        for n, u, p in rows:
            print(f"{n:<{w}}  {u:<{wu}}  {p}")
    blocked = [n for n in names if res_p.get(n, {}).get("blocked_by")]
    if blocked:
        print(f"[c10d]: needs a c10d backend for '{device}'; none is registered: "
              + res_p[blocked[0]]["blocked_by"])
    print("acceptance: " + ("every feature passes on the patched torch" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
