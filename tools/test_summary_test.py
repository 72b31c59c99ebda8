#!/usr/bin/env python3
"""Tests of tools/test_summary.py: shards, stale results of other shard counts, the harness's
synthesized failures, skips and tests GoogleTest did not run.

Usage: test_summary_test.py TEST_SUMMARY_PY
"""
import os
import subprocess
import sys
import tempfile

SUMMARY = sys.argv[1] if len(sys.argv) > 1 else None


def suite(*cases):
    body = "".join(cases)
    return f'<?xml version="1.0"?>\n<testsuites><testsuite name="s">{body}</testsuite></testsuites>\n'


PASS = '<testcase name="p" status="run" result="completed"/>'
FAIL = ('<testcase name="f" status="run" result="completed"><failure message="crashed: the '
        'process running area comm was killed by signal 11"/></testcase>')
SKIP = '<testcase name="s" status="run" result="skipped"><skipped message="capability"/></testcase>'
NOTRUN = '<testcase name="DISABLED_x" status="notrun" result="suppressed"/>'
ERROR = '<testcase name="e"><error message="exited with error code 1"/></testcase>'


def write(root, rel, text, mtime):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.utime(path, (mtime, mtime))


def summary(*dirs):
    proc = subprocess.run([sys.executable, SUMMARY, *dirs], capture_output=True, text=True)
    return proc.returncode, proc.stdout.strip()


def main():
    if SUMMARY is None:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    failures = []

    def expect(got, want, what):
        if got != want:
            failures.append(f"{what}: got {got!r}, expected {want!r}")

    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as d:
        # A target sharded 4 ways now; earlier an unsharded run and a 2-way run left results.
        write(d, "conf/t/test.xml", suite(PASS, PASS, PASS, PASS, PASS), 1000)
        write(d, "conf/t/shard_1_of_2/test.xml", suite(PASS, FAIL), 2000)
        write(d, "conf/t/shard_2_of_2/test.xml", suite(PASS), 2000)
        for i in range(1, 5):
            write(d, f"conf/t/shard_{i}_of_4/test.xml", suite(PASS, SKIP if i == 2 else PASS),
                  3000 + i)
        expect(summary(d), (0, "7 passed, 0 failed, 1 skipped"), "current shards only")
        # A failed area's synthesized failure, a Bazel-written error, a test GoogleTest did not run.
        write(d, "conf/u/shard_1_of_2/test.xml", suite(PASS, FAIL), 5000)
        write(d, "conf/u/shard_2_of_2/test.xml", suite(NOTRUN, ERROR), 5000)
        expect(summary(d), (1, "8 passed, 2 failed, 2 skipped"), "failures in shards")
        # Unsharded again, newest: the shard sets are stale.
        write(d, "conf/u/test.xml", suite(PASS), 6000)
        expect(summary(d), (0, "8 passed, 0 failed, 1 skipped"), "unsharded after sharded")
        # An unreadable log is a failure; nothing at all is a failure too.
        write(d, "other/v/test.xml", "<testsuites><testsuite", 7000)
        expect(summary(d), (1, "8 passed, 1 failed, 1 skipped"), "truncated log")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as empty:
        expect(summary(empty), (1, "0 passed, 0 failed"), "no logs")

    for f in failures:
        print("FAILED:", f)
    print("test_summary_test:", "ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
