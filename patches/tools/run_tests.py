#!/usr/bin/env python3
"""Runs every per-patch test on an unpatched and on a patched copy of the installed torch.

The system's torch is never modified: two private copies of it are made, each in a virtual
environment of its own (``torchcopy.py``), the series is applied to one of them with
``halpatch.py apply`` (tree mode, ``patch -p1``), and each ``patches/tests/test_NNNN_*.py`` runs
in its own pytest subprocess under the interpreter of the copy's environment. A patch's test
must FAIL on the unpatched copy (it shows the hardcoding, on the torch_hal device) and PASS on
the patched one. Prints the table and exits non-zero otherwise.

``--series-dir patches/<version>`` runs a release's series: run it with a Python whose torch is
that release (a virtual environment's, say); the copies are made of that torch. The tests are
shared (``patches/tests``); only those of the patches in the release's series run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
PATCHES = TOOLS.parent
sys.path.insert(0, str(TOOLS))
import halpatch  # noqa: E402
sys.path.insert(0, str(PATCHES.parent / "tools"))
import junit  # noqa: E402
import torchcopy  # noqa: E402

RESULT = {0: "pass", 1: "FAIL"}  # other pytest exit codes: error


def prepare_copies(workdir: Path, series_dir: Path = PATCHES) -> tuple[Path, Path]:
    unpatched = torchcopy.make_copy(workdir / "unpatched")
    patched = torchcopy.make_copy(workdir / "patched")
    r = subprocess.run(
        [sys.executable, str(TOOLS / "halpatch.py"), "--series-dir", str(series_dir),
         "apply", str(patched)],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"applying the series to the patched copy failed:\n{r.stdout}{r.stderr}")
    _, patches = halpatch.read_series(series_dir)
    for root, want in ((unpatched, "not applied"), (patched, "applied")):
        states = halpatch.series_status(root, patches)
        bad = [p.name for p, (s, _) in zip(patches, states) if s != want]
        if bad:
            raise SystemExit(f"{root}: expected every patch {want}, but not: {', '.join(bad)}")
    return unpatched, patched


def run_pytest(test: Path, copy_root: Path, timeout: int) -> tuple[str, float, str]:
    env = torchcopy.python_env(copy_root, {"OMP_NUM_THREADS": "1"})
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            [torchcopy.python_executable(copy_root), "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"--rootdir={test.parent}", str(test)],
            cwd=test.parent, env=env, capture_output=True, text=True, timeout=timeout,
        )
        status = RESULT.get(r.returncode, f"error({r.returncode})")
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        status, out = "timeout", (e.stdout or "") if isinstance(e.stdout, str) else ""
    return status, time.monotonic() - t0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series-dir", type=Path, default=PATCHES,
                    help="the series to test (default: %(default)s; a release's series: "
                    "patches/<version>)")
    ap.add_argument("--workdir", type=Path, help="where the torch copies go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    # One pytest process per CPU: each is a single-threaded import-and-test run of its own.
    ap.add_argument("-j", "--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                    help="pytest runs at once (default: one per CPU, at most 4)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per pytest run")
    ap.add_argument("--patch", action="append", help="only these patch numbers (NNNN)")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the output of failures")
    ap.add_argument("--junit", type=Path, help="also write the results as JUnit XML here")
    args = ap.parse_args(argv)

    series_dir = args.series_dir.resolve()
    _, patches = halpatch.read_series(series_dir)
    base_version = halpatch.installed_release(series_dir)
    installed = halpatch.torch_version(halpatch.installed_torch_root()) or "unknown"
    tests_dir = halpatch.tests_dir(series_dir)
    if args.patch:
        patches = [p for p in patches if p.number in args.patch]
    rows = []
    for p in patches:
        tests = sorted(tests_dir.glob(f"test_{p.number}_*.py"))
        if not tests:
            rows.append((p, None))
        rows.extend((p, t) for t in tests)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="halpatch-tests-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        unpatched, patched = prepare_copies(workdir, series_dir)
        jobs = []
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for p, t in rows:
                if t is None:
                    jobs.append((p, t, None, None))
                    continue
                jobs.append((p, t, pool.submit(run_pytest, t, unpatched, args.timeout),
                             pool.submit(run_pytest, t, patched, args.timeout)))
            results = []
            for p, t, fu, fp in jobs:
                if t is None:
                    results.append((p, "(no test)", ("missing", 0, ""), ("missing", 0, "")))
                else:
                    results.append((p, t.name, fu.result(), fp.result()))
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.keep:
            print(f"torch copies kept in {workdir}")

    ok_all = True
    table = []
    cases = []
    for p, tname, (u, tu, ou), (a, ta, oa) in results:
        ok = u == "FAIL" and a == "pass"
        ok_all &= ok
        table.append((p.number, p.subject, u, a, "ok" if ok else "WRONG", tu + ta))
        detail = "" if ok else (f"expected FAIL unpatched and pass patched, got {u} and {a}\n"
                                f"---- unpatched ----\n{ou[-3000:]}\n---- patched ----\n{oa[-3000:]}")
        cases.append(junit.Case(f"{p.number} {tname}", "pass" if ok else "fail", detail))
        if args.verbose and not ok:
            for label, out in (("unpatched", ou), ("patched", oa)):
                print(f"---- {tname} ({label}) ----\n{out[-4000:]}")
    if args.markdown:
        print(f"| patch | concern | unpatched {base_version} | patched | |")
        print("|---|---|---|---|---|")
        for n, subj, u, a, v, _ in table:
            print(f"| {n} | {subj} | {u} | {a} | {v} |")
    else:
        w = max(len(s) for _, s, *_ in table)
        print(f"the {base_version} series on torch {installed}")
        print(f"{'patch':<6} {'concern':<{w}}  {'unpatched':<10} {'patched':<10} {'':<5} "
              f"{'s (both)':>8}")
        for n, subj, u, a, v, secs in table:
            print(f"{n:<6} {subj:<{w}}  {u:<10} {a:<10} {v:<5} {secs:8.1f}")
    n_ok = sum(1 for row in table if row[4] == "ok")
    if args.junit:
        suite = "patches-tests" if halpatch.main_series_dir(series_dir) is None else \
            f"patches-tests-{base_version}"
        junit.write(args.junit, suite, cases)
    print(f"{n_ok} of {len(table)} per-patch tests fail unpatched and pass patched "
          f"({sum(row[5] for row in table):.0f} s of pytest runs, {args.jobs} at a time)")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
