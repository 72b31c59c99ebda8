#!/usr/bin/env python3
"""Runs PyTorch's OpenReg tests, renamed onto the torch_hal devices, and checks the outcomes.

    python3 tools/openreg_run.py [--out out/openreg] [--devices hal,neuron] [--timeout 300]
                                 [--jobs 4] [--check] [--junit PATH]

For each device ("hal": the cpu backend, "neuron": the Trainium backend on the libnrt
emulator) the verbatim files of bridge/tests/openreg_upstream/ are renamed by
tools/openreg_rename.py into <out>/<device>/, and every file runs in a pytest process of its
own (from the output directory's parent, so that the installed torch_hal is what is tested),
with a time limit per file and a JUnit XML file beside it; --jobs files run at once, the
slowest first (test_ipc.py mostly waits). On neuron every process takes 2 NeuronCores
(NEURON_RT_NUM_CORES=2: OpenReg's backend has two devices, and the processes a file starts,
spawned children and IPC producers, take free cores of their own) of an emulated machine of
the file's own (NEURON_EMU_LOCK_DIR: a temporary directory, removed when the file is done).

The table printed at the end gives passed / failed / errors / skipped per file and device, and
the files a time limit stopped. With --check, every case's outcome is compared with
bridge/tests/openreg_upstream/expected_failures.txt (each expected failure with its reason;
RESULTS.md has the details): a failure not listed there, a listed case that passed, and a file
without results are errors, and the exit status is 1. --junit writes the check as JUnit XML
(one case per test case: expected failures are skipped with their reason). Without --check the
exit status is 0 unless a file could not be run at all.
"""

import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
UPSTREAM = os.path.join(REPO, "bridge", "tests", "openreg_upstream")
EXPECTED = os.path.join(UPSTREAM, "expected_failures.txt")
BACKENDS = {"hal": "cpu", "neuron": "trainium"}
# The files that take longest, started first (test_ipc.py waits 30 s per case).
SLOW_FIRST = ("test_ipc.py", "test_memory.py", "test_ops.py", "test_profiler.py")


def counts(cases):
    """(passed, failed, errors, skipped) of a file's {case: outcome}."""
    outcomes = list(cases.values())
    return tuple(outcomes.count(k) for k in ("passed", "failed", "error", "skipped"))


def read_cases(junit_path, test_file):
    """{case id: outcome} from a pytest JUnit XML file. A case id is "Class::test" (the file
    part of the class name dropped), or "(collection)" for an error collecting the file."""
    root = ET.parse(junit_path).getroot()
    stem = test_file[:-3]
    cases = {}
    for tc in root.iter("testcase"):
        cls = tc.get("classname", "")
        name = tc.get("name", "")
        if not cls:
            case = "(collection)"
        else:
            parts = cls.split(".")
            cls = ".".join(parts[parts.index(stem) + 1:]) if stem in parts else cls
            case = f"{cls}::{name}" if cls else name
        tags = {child.tag for child in tc}
        outcome = ("failed" if "failure" in tags else "error" if "error" in tags
                   else "skipped" if "skipped" in tags else "passed")
        cases[case] = outcome
    return cases


def prepare(device, out):
    target = os.path.join(out, device)
    subprocess.run([sys.executable, os.path.join(HERE, "openreg_rename.py"), "--device", device,
                    target], check=True, stdout=subprocess.DEVNULL)
    names = sorted(f for f in os.listdir(target) if f.startswith("test_") and f.endswith(".py"))
    return [(device, target, n) for n in names]


def run_file(device, target, name, out, timeout):
    """Runs one renamed file: (device, file, {case: outcome} or None, note)."""
    env = dict(os.environ, TORCH_HAL_BACKEND=BACKENDS[device])
    # An emulated machine per file: the file's own child processes share it, and its lock
    # files go when the file is done.
    machine = tempfile.TemporaryDirectory(prefix=f"openreg-{device}-{name[:-3]}-")
    env["NEURON_EMU_LOCK_DIR"] = machine.name
    env.pop("NEURON_EMU_INSTANCE_ID", None)
    if device == "neuron":
        env.setdefault("NEURON_RT_NUM_CORES", "2")
    junit = os.path.join(target, name.replace(".py", ".xml"))
    if os.path.exists(junit):
        os.remove(junit)
    started = time.monotonic()
    print(f"openreg: {device} {name} ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join(target, name), f"--junitxml={junit}"],
                       cwd=os.path.dirname(os.path.abspath(out)), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
        note = ""
    except subprocess.TimeoutExpired:
        note = f"stopped by the {timeout} s limit"
    finally:
        machine.cleanup()
    note = (note + f" ({time.monotonic() - started:.0f} s)").strip()
    cases = read_cases(junit, name) if os.path.exists(junit) else None
    return device, name, cases, note


def read_expected(path):
    """{(device, file, case): reason} from expected_failures.txt: lines "<device> <file>::<case>
    <reason>", device "hal", "neuron" or "*" (both); "#" starts a comment line."""
    expected = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"(\S+)\s+(test_\w+\.py)::(\S+)\s+(.+)$", line)
            if not m:
                raise ValueError(f"{path}:{lineno}: expected '<device> <file>::<case> <reason>'")
            devices = list(BACKENDS) if m.group(1) == "*" else [m.group(1)]
            for d in devices:
                expected[(d, m.group(2), m.group(3))] = m.group(4)
    return expected


def check(results, expected, devices):
    """[(device, file, case, verdict, message)]: verdict "ok", "xfail" or "error"."""
    rows = []
    for (device, name), (cases, note) in sorted(results.items()):
        if cases is None:
            rows.append((device, name, "(file)", "error", f"no results: {note}"))
            continue
        if "limit" in note:
            rows.append((device, name, "(file)", "error", note))
        for case, outcome in sorted(cases.items()):
            reason = expected.get((device, name, case))
            if outcome in ("failed", "error"):
                if reason is None:
                    rows.append((device, name, case, "error",
                                 f"{outcome}, not an expected failure (RESULTS.md, "
                                 "expected_failures.txt)"))
                else:
                    rows.append((device, name, case, "xfail", reason))
            elif reason is not None and outcome == "passed":
                rows.append((device, name, case, "error",
                             "passed, but listed as an expected failure: remove its line"))
            else:
                rows.append((device, name, case, "ok", outcome))
    for (device, name, case), reason in sorted(expected.items()):
        ran = results.get((device, name), (None, ""))[0]
        if device in devices and ran is not None and case not in ran:
            rows.append((device, name, case, "error", "listed as an expected failure, not run"))
    return rows


def write_junit(path, rows):
    suite = ET.Element("testsuite", name="openreg")
    for device, name, case, verdict, message in rows:
        tc = ET.SubElement(suite, "testcase", classname=f"openreg.{device}.{name[:-3]}",
                           name=case)
        if verdict == "error":
            ET.SubElement(tc, "failure", message=message)
        elif verdict == "xfail" or message == "skipped":
            ET.SubElement(tc, "skipped",
                          message=("expected failure: " + message) if verdict == "xfail"
                          else "skipped by the test")
    suite.set("tests", str(len(rows)))
    suite.set("failures", str(sum(r[3] == "error" for r in rows)))
    suite.set("skipped", str(len(suite.findall("testcase/skipped"))))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(REPO, "out", "openreg"))
    p.add_argument("--devices", default="hal,neuron", help="comma-separated: hal, neuron")
    p.add_argument("--timeout", type=int, default=300, help="seconds per test file")
    p.add_argument("--jobs", type=int, default=4, help="test files run at once")
    p.add_argument("--check", action="store_true",
                   help="compare with expected_failures.txt; exit 1 on a difference")
    p.add_argument("--expected", default=EXPECTED)
    p.add_argument("--junit", help="write the check's results as JUnit XML here")
    args = p.parse_args(argv)
    devices = [d for d in args.devices.split(",") if d]
    unknown = sorted(set(devices) - set(BACKENDS))
    if unknown:
        p.error(f"unknown device(s) {unknown}: choose from {sorted(BACKENDS)}")
    expected = read_expected(args.expected) if args.check else {}
    jobs = [job for d in devices for job in prepare(d, args.out)]
    jobs.sort(key=lambda j: (j[2] not in SLOW_FIRST, SLOW_FIRST.index(j[2])
                             if j[2] in SLOW_FIRST else 0))
    started = time.monotonic()
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_file, d, target, name, args.out, args.timeout)
                   for d, target, name in jobs]
        for fut in concurrent.futures.as_completed(futures):
            device, name, cases, note = fut.result()
            results[(device, name)] = (cases, note)
    missing = 0
    print(f"\n{'file':22s} " + " ".join(f"{d + ' pass/fail/err/skip':>26s}" for d in devices))
    totals = {d: [0, 0, 0, 0] for d in devices}
    for name in sorted({n for _, n in results}):
        cells = []
        for d in devices:
            cases, note = results.get((d, name), (None, "not run"))
            if cases is None:
                missing += 1
                cells.append(f"{'no result ' + note:>26s}")
                continue
            got = counts(cases)
            totals[d] = [a + b for a, b in zip(totals[d], got)]
            mark = " *" if "limit" in note else ""
            cells.append(f"{'/'.join(str(v) for v in got) + mark:>26s}")
        print(f"{name:22s} " + " ".join(cells))
    print(f"{'total':22s} " + " ".join(f"{'/'.join(str(v) for v in totals[d]):>26s}"
                                       for d in devices))
    if any("limit" in note for _, note in results.values()):
        print("* stopped by the time limit after reporting these cases")
    print(f"openreg: {len(results)} files in {time.monotonic() - started:.0f} s; causes of every "
          "failure: bridge/tests/openreg_upstream/RESULTS.md")
    if not args.check:
        return 1 if missing else 0
    rows = check(results, expected, devices)
    if args.junit:
        write_junit(args.junit, rows)
    errors = [r for r in rows if r[3] == "error"]
    for device, name, case, _, message in errors:
        print(f"openreg: UNEXPECTED {device} {name}::{case}: {message}")
    print(f"openreg check: {sum(r[3] == 'ok' for r in rows)} as expected, "
          f"{sum(r[3] == 'xfail' for r in rows)} expected failures, {len(errors)} unexpected")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
