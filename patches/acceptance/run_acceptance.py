#!/usr/bin/env python3
"""Runs the CUDA-style acceptance scripts under torchrun on an unpatched and a patched torch.

    python3 patches/acceptance/run_acceptance.py [--devices hal,neuron] [--markdown]
                                                 [--update-expected] [--junit FILE]
                                                 [--series-dir patches/<version>]

Both torches are private copies of the installed one (the system's is not modified); the series
is applied to one of them. Every script of ``SCRIPTS`` runs as ``python -m torch.distributed.run
--standalone --nproc-per-node N SCRIPT --device DEVICE`` with 2 ranks on a node of two devices
(``hal``: the cpu backend with ``HAL_CPU_DEVICES=2``; ``neuron``: the Trainium backend on the
bundled libnrt emulator, an emulated ``trn1.2xlarge`` of its own per launch, so that runs beside
it never take its NeuronCores). The scripts that compare with the CPU (``COMPARED``) first run
once with ``--device cpu`` on the unpatched torch without torch_hal (gloo), the reference their
device runs are checked against, step by step and bit for bit.

A feature's cell is the worst result over the ranks. The table is compared with
``expected.json``: the exit status is 1 when a feature that passed patched there fails now
(a regression), or when a feature fails patched at all and is not one of the device's
``known_gaps`` (each with its reason); 0 otherwise. Unpatched results that differ from the
file, known gaps that now pass and features the file does not know are reported, not failed.
``--update-expected`` writes this run's results into the file (its known gaps kept).

``--series-dir patches/<version>`` runs a release's series (run it with a Python whose torch is
that release, a virtual environment's, say: the copies are of this Python's torch); its results
are compared with ``expected-<version>.json``, since what a release needs the series for
differs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parent / "tools"
sys.path.insert(0, str(TOOLS))
import halpatch  # noqa: E402
import run_tests  # noqa: E402
sys.path.insert(0, str(HERE.parent.parent / "tools"))
import junit  # noqa: E402
import torchcopy  # noqa: E402

SCRIPTS = ("train_cuda_style.py", "torchrun_cuda_style.py")
COMPARED = ("torchrun_cuda_style.py",)  # scripts whose features are compared with a CPU run
EXPECTED = HERE / "expected.json"
NPROC = 2  # ranks per run: one per device of the node
AUTO_FEATURE = "torchrun --nproc-per-node auto"
RANK_ORDER = ("error", "FAIL", "missing", "not", "skip", "pass")  # "not run": reference runs
COPIES = ("unpatched", "patched")


def kind(status: str) -> str:
    return status.split(":")[0].split(" ")[0]


def worst(a: str | None, b: str) -> str:
    if a is None:
        return b

    def rank(status):  # anything unknown counts as an error
        return RANK_ORDER.index(kind(status)) if kind(status) in RANK_ORDER else 0

    return a if rank(a) <= rank(b) else b


def torch_hal_lib_dir() -> Path | None:
    spec = importlib.util.find_spec("torch_hal")  # without importing it (nor torch)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def device_env(device: str) -> dict[str, str]:
    """The environment that makes DEVICE a node of NPROC devices (torch_hal's devices)."""
    if device == "hal":
        return {"TORCH_HAL_BACKEND": "cpu", "HAL_CPU_DEVICES": str(NPROC)}
    if device == "neuron":
        lib = torch_hal_lib_dir()
        env = {"TORCH_HAL_BACKEND": "trainium", "NEURON_EMU_INSTANCE": "trn1.2xlarge",
               # one emulated machine per launch: never the cores of a run beside this one
               "NEURON_EMU_INSTANCE_ID": f"acceptance-{os.getpid()}-{secrets.token_hex(4)}"}
        if lib is not None:  # the emulator, named on purpose (torch_hal does not warn then)
            env["HAL_NEURON_LIBNRT"] = str(lib / "libnrt.so.1")
        return env
    return {}


def neuron_instance_dir(env: dict[str, str]) -> Path | None:
    instance = env.get("NEURON_EMU_INSTANCE_ID")
    if not instance:
        return None
    base = env.get("NEURON_EMU_LOCK_DIR") or str(
        Path(env.get("TMPDIR") or tempfile.gettempdir()) / f"neuron-emu-{os.geteuid()}")
    return Path(base) / instance


def launch_env(copy_root: Path, extra: dict[str, str]) -> dict[str, str]:
    env = torchcopy.python_env(copy_root, {"OMP_NUM_THREADS": "1"})
    for name in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "RANK", "LOCAL_RANK",
                 "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCH_HAL_BACKEND", "TORCH_DEVICE_BACKEND_AUTOLOAD", "HAL_CPU_DEVICES",
                 "NEURON_EMU_INSTANCE", "NEURON_EMU_INSTANCE_ID", "HAL_NEURON_LIBNRT"):
        env.pop(name, None)
    env.update(extra)
    return env


def run_command(cmd: list[str], env: dict[str, str], timeout: int) -> tuple[int, str, float]:
    """Runs cmd in a session of its own; returns its exit status, output and CPU seconds (its
    own and its processes': torchrun waits for its ranks). On timeout the whole session
    (torchrun and its ranks) is killed."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    killed = False
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline and not killed:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.1)
        proc.returncode = -1 if killed else os.waitstatus_to_exitcode(status)
        reader.join()
        out = "".join(chunks) + (f"\n[killed after {timeout} s]" if killed else "")
        return proc.returncode, out, usage.ru_utime + usage.ru_stime
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        instance = neuron_instance_dir(env)
        if instance is not None:
            shutil.rmtree(instance, ignore_errors=True)


def seed_bytecode(copy_root: Path) -> int:
    """Hard-links the installed torch's bytecode caches into a copy, which holds the sources only.

    Python checks a ``.pyc`` against its source's modification time and size, which the copy
    keeps, so only the modules the series rewrote are compiled again. Without the caches, the
    first launches on a copy compile torch's modules in each of their three processes at once.
    (Python replaces a stale ``.pyc`` by renaming a new file over it: a link is never written
    through.)"""
    src = halpatch.installed_torch_root() / "torch"
    dst = copy_root / "torch"
    n = 0
    for cache in src.rglob("__pycache__"):
        target = dst / cache.relative_to(src)
        if not target.parent.is_dir():
            continue
        target.mkdir(exist_ok=True)
        for f in cache.glob("*.pyc"):
            t = target / f.name
            if t.exists():
                continue
            try:
                os.link(f, t)
            except OSError:
                shutil.copy2(f, t)
            n += 1
    return n


def launcher_auto(copy_root: Path, device: str, timeout: int) -> tuple[int | None, str]:
    """What ``--nproc-per-node auto`` gives in torchrun's launcher process, and from what."""
    code = ("import sys; sys.argv = ['torchrun']; import json, torch; "
            "from torch.distributed.run import determine_local_world_size as d; "
            "a = torch.accelerator.current_accelerator() if torch.accelerator.is_available() "
            "else None; print(json.dumps([d('auto'), a.type if a else 'cpu']))")
    env = launch_env(copy_root, device_env(device))
    rc, out, _ = run_command([torchcopy.python_executable(copy_root), "-c", code], env, timeout)
    try:
        n, counted = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, f"error: the launcher check failed (exit {rc}): {out.strip()[-300:]}"
    if counted != device or n != NPROC:
        return None, (f"FAIL: torchrun's launcher gives {n} for auto, counting {counted} "
                      f"devices (the node has {NPROC} {device} devices)")
    return n, "pass"


class Launch:
    def __init__(self, script, device, copy, copy_root, out, args, nproc=str(NPROC)):
        self.script, self.device, self.copy, self.copy_root = script, device, copy, copy_root
        self.out, self.args, self.nproc = out, args, nproc
        self.seconds = 0.0
        self.cpu_seconds = 0.0

    def run(self, timeout: int, extra_env: dict[str, str]) -> dict:
        self.out.mkdir(parents=True, exist_ok=True)
        cmd = [torchcopy.python_executable(self.copy_root), "-m", "torch.distributed.run",
               "--standalone", f"--nproc-per-node={self.nproc}", str(HERE / self.script),
               "--device", self.device, "--json-dir", str(self.out),
               "--work-dir", str(self.out / "work"), *self.args]
        env = launch_env(self.copy_root, extra_env)
        t0 = time.monotonic()
        rc, log, self.cpu_seconds = run_command(cmd, env, timeout)
        self.seconds = time.monotonic() - t0
        (self.out / "log.txt").write_text(log)
        return merge(self.out, self.script, rc, log)


def merge(out: Path, script: str, rc: int, log: str) -> dict:
    """Features of one run: the worst status over the ranks; a rank without results is an
    error of every feature."""
    stem = Path(script).stem
    ranks = {}
    for f in sorted(out.glob(f"{stem}.rank*.json")):
        data = json.loads(f.read_text())
        ranks[data["meta"]["rank"]] = data
    merged: dict[str, dict] = {}
    for data in ranks.values():
        for name, entry in data["features"].items():
            cur = merged.get(name)
            if cur is None or worst(cur["status"], entry["status"]) != cur["status"]:
                merged[name] = dict(entry, rank=data["meta"]["rank"])
    missing = [r for r in range(NPROC) if r not in ranks]
    if missing:
        why = (f"error: rank {', '.join(map(str, missing))} wrote no results "
               f"(torchrun exited {rc})")
        for name in merged:
            merged[name] = {"status": why, "log": log[-3000:]}
        merged["_run"] = {"status": why, "log": log[-3000:]}
    return merged


def load_expected(path: Path) -> dict:
    if not path.exists():
        return {"results": {}, "known_gaps": {}}
    return json.loads(path.read_text())


def short(status: str, width: int) -> str:
    return status if len(status) <= width else status[: width - 3] + "..."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="hal,neuron", help="comma-separated (default hal,neuron)")
    ap.add_argument("--device", help="one device only (same as --devices DEVICE)")
    ap.add_argument("--scripts", default=",".join(SCRIPTS), help="comma-separated subset")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--timeout", type=int, default=420, help="seconds per torchrun launch")
    # two at once on two cores: the ranks of a launch wait for each other often enough that a
    # second launch finishes the phase in about 70% of the time (measured)
    ap.add_argument("-j", "--jobs", type=int, default=min(4, max(2, (os.cpu_count() or 2) // 2)),
                    help="torchrun launches at once (default: half the CPUs, 2 to 4)")
    ap.add_argument("--series-dir", type=Path, default=HERE.parent,
                    help="the series (default: %(default)s; a release's series: "
                    "patches/<version>)")
    ap.add_argument("--expected", type=Path,
                    help="default: expected.json, or expected-<version>.json for a release's "
                    "series")
    ap.add_argument("--update-expected", action="store_true",
                    help="write this run's results into the expected file")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--junit", type=Path, help="also write the patched results as JUnit XML here")
    args = ap.parse_args(argv)
    devices = [args.device] if args.device else [d for d in args.devices.split(",") if d]
    scripts = [s for s in args.scripts.split(",") if s]
    for s in scripts:
        if s not in SCRIPTS:
            ap.error(f"unknown script {s}; known: {', '.join(SCRIPTS)}")
    series_dir = args.series_dir.resolve()
    release = args.release = halpatch.installed_release(series_dir)
    main_series = series_dir == HERE.parent.resolve()
    args.suite = "patches-acceptance" if main_series else f"patches-acceptance-{release}"
    if args.expected is None:
        args.expected = EXPECTED if main_series else HERE / f"expected-{release}.json"
    expected = load_expected(args.expected)

    t_start = time.monotonic()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="halpatch-acceptance-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str, str], dict] = {}  # (script, device, copy) -> features
    autos: dict[tuple[str, str], str] = {}
    launches: list[Launch] = []
    reference: dict[str, dict] = {}
    try:
        unpatched, patched = run_tests.prepare_copies(workdir, series_dir)
        for root in (unpatched, patched):
            seed_bytecode(root)
        roots = {"unpatched": unpatched, "patched": patched}
        t_copies = time.monotonic() - t_start
        # Inductor's kernel cache: one per run, shared by its launches (each compiles once)
        common = {"TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor-cache")}

        def run_launch(launch: Launch, env_extra: dict[str, str]) -> dict:
            return launch.run(args.timeout, {**common, **env_extra})

        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            ref_futures = {}
            for s in scripts:
                if s in COMPARED:
                    ref = Launch(s, "cpu", "unpatched", unpatched, workdir / "reference",
                                 ["--record", str(workdir / "reference")])
                    launches.append(ref)
                    ref_futures[s] = pool.submit(run_launch, ref,
                                                 {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
            futures = {}
            for device in devices:
                for copy in COPIES:
                    root = roots[copy]
                    for s in scripts:
                        nproc = str(NPROC)
                        if s == "train_cuda_style.py":
                            n, autos[(device, copy)] = launcher_auto(root, device, 120)
                            if n is not None:
                                nproc = "auto"
                        launch = Launch(s, device, copy, root, workdir / f"{device}-{copy}",
                                        ["--compare", str(workdir / "reference")]
                                        if s in COMPARED else [], nproc)
                        launches.append(launch)
                        deps = [ref_futures[s]] if s in ref_futures else []

                        def job(launch=launch, device=device, deps=deps):
                            for d in deps:
                                d.result()
                            return run_launch(launch, device_env(device))

                        futures[(s, device, copy)] = pool.submit(job)
            for key, f in ref_futures.items():
                reference[key] = f.result()
            for key, f in futures.items():
                results[key] = f.result()
    finally:
        if args.keep:
            print(f"work directory kept: {workdir}")
        elif args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    # the launcher's answer for auto replaces what the ranks saw when it is not the device count
    for (device, copy), status in autos.items():
        feats = results.get(("train_cuda_style.py", device, copy), {})
        if status != "pass":
            feats[AUTO_FEATURE] = {"status": status}

    return report(args, devices, scripts, results, reference, expected, launches,
                  t_copies, time.monotonic() - t_start)


def feature_names(script: str, devices, results, expected) -> list[str]:
    names: list[str] = []
    for device in devices:
        for copy in ("patched", "unpatched"):
            for n in results.get((script, device, copy), {}):
                if not n.startswith("_") and n not in names:
                    names.append(n)
    for n in expected.get("results", {}).get(script, {}):
        if n not in names:
            names.append(n)
    return names


def report(args, devices, scripts, results, reference, expected, launches, t_copies, t_total):
    gaps = expected.get("known_gaps", {})
    base = expected.get("results", {})
    failures, notes, cases, rows, details = [], [], [], [], []
    for s in scripts:
        if s in reference and "_run" in reference[s]:
            notes.append(f"the CPU reference run of {s} failed: {reference[s]['_run']['status']}"
                         f"\n{reference[s]['_run'].get('log', '')}")
        elif s in reference:
            bad = {n: e["status"] for n, e in reference[s].items()
                   if kind(e["status"]) not in ("pass", "not")}
            for n, st in bad.items():
                notes.append(f"the CPU reference run of {s}: {n}: {st}")
        for n in feature_names(s, devices, results, expected):
            row = [n]
            if n not in base.get(s, {}):
                notes.append(f"{s}: {n}: not in {args.expected.name} (--update-expected)")
            for device in devices:
                for copy in COPIES:
                    feats = results.get((s, device, copy), {})
                    entry = feats.get(n) or feats.get("_run") or {"status": "missing"}
                    st = entry["status"]
                    was = base.get(s, {}).get(n, {}).get(device, {}).get(copy)
                    gap = gaps.get(device, {}).get(n)
                    mark = " [c10d]" if entry.get("blocked_by") else ""
                    if copy == "patched":
                        ok = kind(st) == "pass"
                        expected_gap = bool(gap) and was != "pass"
                        if ok and gap:
                            notes.append(f"{device}: known gap now passes, remove it from "
                                         f"{args.expected.name}: {n}")
                        elif not ok and was == "pass":
                            failures.append(f"REGRESSION {device} {s}: {n}: passed patched in "
                                            f"{args.expected.name}, now {st}")
                            mark += " [REGRESSION]"
                        elif not ok and gap:
                            mark += " [known gap]"
                        elif not ok:
                            failures.append(f"{device} {s}: {n}: fails patched and is not a "
                                            f"known gap: {st}")
                        if not ok and not expected_gap:
                            details.append(f"---- {device} patched, {s}: {n}\n{st}\n" + (
                                entry.get("traceback") or entry.get("log", ""))[-2500:])
                        detail = st + "\n" + entry.get("traceback", "") + entry.get("log", "")
                        cases.append(junit.Case(
                            f"{device} patched: {n}",
                            "pass" if ok else ("skip" if expected_gap else "fail"),
                            "" if ok else (f"known gap (ran, failed as expected): {gap}\n"
                                           if gap else "") + detail))
                    if was is not None and kind(st) != was:
                        notes.append(f"{device} {copy}: {n}: {kind(st)}, {args.expected.name} "
                                     f"says {was}")
                    row.append(st + mark)
            rows.append((s, row))

    header = ["feature"] + [f"{d} {args.release if c == 'unpatched' else '+ series'}"
                            for d in devices for c in COPIES]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        current = None
        for s, row in rows:
            if s != current:
                print(f"| **`{s}`** |" + " |" * (len(header) - 1))
                current = s
            print("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    else:
        cells = [[row[0]] + [short(c, 46) for c in row[1:]] for _, row in rows]
        widths = [max(len(r[i]) for r in cells + [header]) for i in range(len(header))]
        current = None
        for (s, _), r in zip(rows, cells):
            if s != current:
                print(f"\n{s}")
                print("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
                current = s
            print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))
    print()
    for device in devices:
        for n, why in gaps.get(device, {}).items():
            print(f"{device}: known gap: {n}: {why}")
    for n in notes:
        print("note: " + n)
    for d in details:
        print(d)
    for f in failures:
        print("FAILED: " + f)
    print("launches (wall s / cpu s): " + ", ".join(
        f"{la.script.split('.')[0]} {la.device} {la.copy} {la.seconds:.0f}/{la.cpu_seconds:.0f}"
        for la in launches))
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"acceptance: {t_total:.0f} s ({t_copies:.0f} s copying torch), "
          f"{sum(la.cpu_seconds for la in launches):.0f} cpu s in {len(launches)} launches, "
          f"{ru.ru_utime + ru.ru_stime:.0f} cpu s in all")
    if args.junit:
        junit.write(args.junit, args.suite, cases)
    if args.update_expected:
        write_expected(args.expected, expected, scripts, devices, results)
        print(f"wrote {args.expected}")
    print("acceptance: " + ("every patched feature passes or is a known gap" if not failures
                            else f"FAILED ({len(failures)})"))
    return 0 if not failures else 1


def write_expected(path, expected, scripts, devices, results):
    """Writes expected.json: known gaps first, then one line per feature."""
    res = {s: {n: dict(c) for n, c in f.items()} for s, f in expected.get("results", {}).items()}
    for s in scripts:
        per = res.setdefault(s, {})
        for n in feature_names(s, devices, results, {}):
            cells = per.setdefault(n, {})
            for device in devices:
                cells[device] = {c: kind((results.get((s, device, c), {}).get(n)
                                          or {"status": "missing"})["status"]) for c in COPIES}
    lines = ["{", ' "known_gaps": ' + json.dumps(expected.get("known_gaps", {}), indent=1,
                                                  ensure_ascii=False).replace("\n", "\n ") + ",",
             ' "results": {']
    for i, (s, feats) in enumerate(res.items()):
        lines.append(f"  {json.dumps(s)}: {{")
        for j, (n, cells) in enumerate(feats.items()):
            comma = "," if j < len(feats) - 1 else ""
            lines.append(f"   {json.dumps(n, ensure_ascii=False)}: {json.dumps(cells)}{comma}")
        lines.append("  }" + ("," if i < len(res) - 1 else ""))
    lines += [" }", "}"]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
