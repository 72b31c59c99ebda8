#!/usr/bin/env python3
"""Tests of the conformance harness itself (conformance/shim.cc, conformance/areas.cc).

Runs hal_conformance on the cpu backend with the test-only hooks HAL_CTS_SELFTEST_CRASH, _HANG,
_FAIL and _SKIP and checks that a test's failure (file, line, message) and skip (reason) reach
the parent's report; that a crashing or hanging test fails alone, with the reason,
while every other test still runs; that the Markdown table, the closing line and the JUnit XML
hold every selected test; that shards split the tests without loss or overlap; that the
in-process mode gives the same results; and that a backend that cannot be opened fails.

Usage: harness_test.py HAL_CONFORMANCE   (HAL_BACKEND_PATH must name the cpu backend's directory)
"""
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

EXE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
TMP = tempfile.mkdtemp(prefix="cts-harness-", dir=os.environ.get("TEST_TMPDIR"))
FAILURES = []
CLOSING_RE = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)
STATUS = ["status.values/cpu_0", "status.strings/cpu_0", "status.version_macros/cpu_0"]
DEVICE = ["device.count/cpu_0", "device.get/cpu_0", "device.get_invalid/cpu_0",
          "device.properties/cpu_0"]
EVENT = ["event.create_destroy/cpu_0", "event.never_recorded_is_complete/cpu_0"]


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"CHECK FAILED: {what}", flush=True)


def base_env():
    """This test's environment, less what Bazel set for this test's own GoogleTest output and
    sharding, which must not reach the harness under test."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GTEST_") and k not in (
               "XML_OUTPUT_FILE", "TEST_PREMATURE_EXIT_FILE", "TEST_SHARD_STATUS_FILE",
               "TEST_TOTAL_SHARDS", "TEST_SHARD_INDEX", "HAL_CTS_IN_PROCESS",
               "HAL_CTS_SELFTEST_CRASH", "HAL_CTS_SELFTEST_HANG", "HAL_CTS_SELFTEST_FAIL",
               "HAL_CTS_SELFTEST_SKIP")}
    return env


def run(name, tests, args=(), env=None, timeout=600):
    """Runs the harness on `tests`; returns (rc, output, {test: failure text or None})."""
    xml = os.path.join(TMP, name + ".xml")
    cmd = [EXE, "--backend=cpu", "--device=0", "--gtest_filter=" + ":".join(tests),
           "--gtest_output=xml:" + xml, *args]
    full_env = base_env()
    full_env.update(env or {})
    proc = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", timeout=timeout)
    print(f"==== {name}: exit {proc.returncode}\n{proc.stdout}", flush=True)
    results = {}
    if os.path.exists(xml):
        for case in ET.parse(xml).getroot().iter("testcase"):
            full = f"{case.get('classname')}.{case.get('name')}"
            failure, skipped = case.find("failure"), case.find("skipped")
            if failure is not None:
                results[full] = failure.get("message", "") + (failure.text or "")
            elif skipped is not None:
                results[full] = "SKIPPED " + skipped.get("message", "")
            else:
                results[full] = None
    return proc.returncode, proc.stdout, results


def closing(output):
    lines = [l for l in output.splitlines() if l.strip()]
    m = CLOSING_RE.match(lines[-1]) if lines else None
    return tuple(int(g) for g in m.groups()) if m else None


def table_row(output, area):
    m = re.search(rf"^\| {area} \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", output, re.M)
    return tuple(int(g) for g in m.groups()) if m else None


def test_failures_and_skips_reach_the_report():
    tests = STATUS + DEVICE
    fail, skip = STATUS[1], DEVICE[2]
    hooks = {"HAL_CTS_SELFTEST_FAIL": fail, "HAL_CTS_SELFTEST_SKIP": skip}
    outcomes = {}
    for mode, args in (("areas", []), ("in-process", ["--in-process"])):
        rc, out, results = run("fail-skip-" + mode, tests, args=args, env=hooks)
        check(rc == 1, f"fail-skip {mode}: exit status {rc}, expected 1")
        check(sorted(results) == sorted(tests), f"fail-skip {mode}: the XML holds {sorted(results)}")
        check(results.get(fail) is not None and "HAL_CTS_SELFTEST_FAIL: failing " + fail in
              results[fail] and "shim.cc" in results[fail],
              f"fail-skip {mode}: {fail} lacks its failure: {results.get(fail)!r}")
        check((results.get(skip) or "").startswith("SKIPPED ") and
              "HAL_CTS_SELFTEST_SKIP: skipping " + skip in results[skip],
              f"fail-skip {mode}: {skip} is not skipped with its reason: {results.get(skip)!r}")
        check(closing(out) == (len(tests) - 2, 1, 1), f"fail-skip {mode}: closing line {closing(out)}")
        check(table_row(out, "status") == (len(STATUS) - 1, 1, 0, 0), f"fail-skip {mode}: status row")
        check(table_row(out, "device") == (len(DEVICE) - 1, 0, 1, 0), f"fail-skip {mode}: device row")
        check("- 1 x HAL_CTS_SELFTEST_SKIP: skipping " + skip in out,
              f"fail-skip {mode}: the skip reason is not listed")
        outcomes[mode] = {t: (r is None, (r or "").startswith("SKIPPED")) for t, r in results.items()}
    check(outcomes["areas"] == outcomes["in-process"], "fail-skip: the two modes disagree")


def test_crash_fails_one_test_and_the_rest_run():
    tests = STATUS + DEVICE + EVENT
    crash = "device.get/cpu_0"
    rc, out, results = run("crash", tests, env={"HAL_CTS_SELFTEST_CRASH": crash})
    check(rc == 1, f"crash: exit status {rc}, expected 1")
    check(sorted(results) == sorted(tests), f"crash: the XML holds {sorted(results)}")
    check(results.get(crash) is not None and "crashed:" in results[crash] and
          re.search(r"area device (was killed by signal \d+|exited with status \d+)",
                    results[crash]) is not None,
          f"crash: {crash} is not reported as a crash: {results.get(crash)!r}")
    others = [t for t in tests if t != crash]
    check(all(results.get(t) is None for t in others),
          f"crash: other tests failed: {[t for t in others if results.get(t)]}")
    check(closing(out) == (len(tests) - 1, 1, 0), f"crash: closing line {closing(out)}")
    check(table_row(out, "device") == (len(DEVICE) - 1, 1, 0, 0),
          f"crash: device row {table_row(out, 'device')}")
    check(table_row(out, "event") == (len(EVENT), 0, 0, 0),
          f"crash: event row {table_row(out, 'event')}")


def test_hang_caught_by_the_per_test_timeout():
    tests = STATUS[:1] + EVENT
    hang = EVENT[0]
    rc, out, results = run("hang-test", tests, args=["--timeout=5"],
                           env={"HAL_CTS_SELFTEST_HANG": hang})
    check(rc == 1, f"hang-test: exit status {rc}, expected 1")
    check(sorted(results) == sorted(tests), f"hang-test: the XML holds {sorted(results)}")
    check(results.get(hang) is not None and "did not finish within 5 s" in results[hang],
          f"hang-test: {hang} is not reported as timed out: {results.get(hang)!r}")
    check(all(results.get(t) is None for t in tests if t != hang),
          "hang-test: other tests failed")
    check(closing(out) == (len(tests) - 1, 1, 0), f"hang-test: closing line {closing(out)}")


def test_hang_caught_by_the_area_timeout():
    tests = STATUS[:2] + DEVICE[:2]
    hang = DEVICE[0]
    rc, out, results = run("hang-area", tests, args=["--timeout=600", "--area-timeout=20"],
                           env={"HAL_CTS_SELFTEST_HANG": hang})
    check(rc == 1, f"hang-area: exit status {rc}, expected 1")
    check(sorted(results) == sorted(tests), f"hang-area: the XML holds {sorted(results)}")
    check(results.get(hang) is not None and
          "timed out: area device did not finish within 20 s" in results[hang],
          f"hang-area: {hang} is not reported as timed out: {results.get(hang)!r}")
    check(results.get(DEVICE[1]) is not None and "not run:" in results[DEVICE[1]],
          f"hang-area: {DEVICE[1]} is not reported as not run: {results.get(DEVICE[1])!r}")
    check(all(results.get(t) is None for t in STATUS[:2]), "hang-area: the status area failed")
    check(closing(out) == (2, 2, 0), f"hang-area: closing line {closing(out)}")
    check(table_row(out, "status") == (2, 0, 0, 0), f"hang-area: status row")


def test_shards_split_the_tests():
    tests = STATUS + DEVICE + EVENT
    seen = []
    for index in range(3):
        rc, out, results = run(f"shard{index}", tests, env={
            "GTEST_TOTAL_SHARDS": "3", "GTEST_SHARD_INDEX": str(index)})
        check(rc == 0, f"shard {index}: exit status {rc}")
        check(results and all(v is None for v in results.values()), f"shard {index}: failures")
        check(closing(out) == (len(results), 0, 0), f"shard {index}: closing line")
        seen += list(results)
    check(sorted(seen) == sorted(tests), f"shards: together they ran {sorted(seen)}")


def test_in_process_mode_gives_the_same_results():
    tests = STATUS + DEVICE
    rc, out, results = run("in-process", tests, args=["--in-process"])
    check(rc == 0 and closing(out) == (len(tests), 0, 0), "in-process: not all passed")
    check(sorted(results) == sorted(tests), "in-process: the XML lacks tests")
    rc, out, results = run("in-process-env", tests[:2], env={"HAL_CTS_IN_PROCESS": "1"})
    check(rc == 0 and closing(out) == (2, 0, 0), "HAL_CTS_IN_PROCESS=1: not all passed")


def test_unopenable_backend_fails():
    full_env = base_env()
    proc = subprocess.run([EXE, "--backend=cts_no_such_backend"], env=full_env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    print(f"==== no such backend: exit {proc.returncode}\n{proc.stdout}{proc.stderr}", flush=True)
    check(proc.returncode == 1, f"no such backend: exit status {proc.returncode}")
    check('cannot open backend "cts_no_such_backend"' in proc.stderr,
          "no such backend: the reason is not printed")
    check(closing(proc.stdout) == (0, 1, 0), "no such backend: closing line")


def main():
    if EXE is None:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            print(f"== {name}", flush=True)
            fn()
    if FAILURES:
        print(f"harness_test: {len(FAILURES)} check(s) failed:\n  " + "\n  ".join(FAILURES))
        return 1
    print("harness_test: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
