#!/usr/bin/env python3
"""Runs PyTorch's OpenReg tests, renamed onto the torch_hal devices, and counts the outcomes.

    python3 tools/openreg_run.py [--out out/openreg] [--devices hal,neuron] [--timeout 300]

For each device ("hal": the cpu backend, "neuron": the Trainium backend on the libnrt
emulator) the verbatim files of bridge/tests/openreg_upstream/ are renamed by
tools/openreg_rename.py into <out>/<device>/, and every file runs in a pytest process of its
own (from the output directory's parent, so that the installed torch_hal is what is tested),
with a time limit per file and a JUnit XML file beside it. The table printed at the end gives
passed / failed / errors / skipped per file and device, and the files a time limit stopped;
bridge/tests/openreg_upstream/RESULTS.md classifies every failure. A report, not a gate: the
exit status is 0 unless a file could not be run at all.
"""

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
UPSTREAM = os.path.join(REPO, "bridge", "tests", "openreg_upstream")
BACKENDS = {"hal": "cpu", "neuron": "trainium"}


def counts(junit_path):
    """(passed, failed, errors, skipped) from a pytest JUnit XML file."""
    root = ET.parse(junit_path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = failed = errors = skipped = 0
    for s in suites:
        total += int(s.get("tests", 0))
        failed += int(s.get("failures", 0))
        errors += int(s.get("errors", 0))
        skipped += int(s.get("skipped", 0))
    return total - failed - errors - skipped, failed, errors, skipped


def run_device(device, out, timeout):
    """Renames the suite for `device` and runs it file by file: {file: (counts or None, note)}."""
    target = os.path.join(out, device)
    subprocess.run([sys.executable, os.path.join(HERE, "openreg_rename.py"), "--device", device,
                    target], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, TORCH_HAL_BACKEND=BACKENDS[device])
    env.pop("NEURON_EMU_LOCK_DIR", None)
    results = {}
    for name in sorted(f for f in os.listdir(target) if f.startswith("test_")):
        # An emulated machine per file: the file's own child processes share it.
        env["NEURON_EMU_INSTANCE_ID"] = f"openreg-{os.getpid()}-{device}-{name}"
        junit = os.path.join(target, name.replace(".py", ".xml"))
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
        note += f" ({time.monotonic() - started:.0f} s)"
        results[name] = (counts(junit) if os.path.exists(junit) else None, note.strip())
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(REPO, "out", "openreg"))
    p.add_argument("--devices", default="hal,neuron", help="comma-separated: hal, neuron")
    p.add_argument("--timeout", type=int, default=300, help="seconds per test file")
    args = p.parse_args(argv)
    devices = [d for d in args.devices.split(",") if d]
    unknown = sorted(set(devices) - set(BACKENDS))
    if unknown:
        p.error(f"unknown device(s) {unknown}: choose from {sorted(BACKENDS)}")
    results = {d: run_device(d, args.out, args.timeout) for d in devices}
    missing = 0
    print(f"\n{'file':22s} " + " ".join(f"{d + ' pass/fail/err/skip':>26s}" for d in devices))
    totals = {d: [0, 0, 0, 0] for d in devices}
    for name in sorted(results[devices[0]]):
        cells = []
        for d in devices:
            got, note = results[d].get(name, (None, "not run"))
            if got is None:
                missing += 1
                cells.append(f"{'no result ' + note:>26s}")
                continue
            totals[d] = [a + b for a, b in zip(totals[d], got)]
            mark = " *" if "limit" in note else ""
            cells.append(f"{'/'.join(str(v) for v in got) + mark:>26s}")
        print(f"{name:22s} " + " ".join(cells))
    print(f"{'total':22s} " + " ".join(f"{'/'.join(str(v) for v in totals[d]):>26s}"
                                       for d in devices))
    if any("limit" in note for d in devices for _, note in results[d].values()):
        print("* stopped by the time limit after reporting these cases")
    print("causes of every failure: bridge/tests/openreg_upstream/RESULTS.md")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
