#!/usr/bin/env python3
"""JUnit XML for checks that are not Bazel or pytest tests, so that they count in the summary.

As a module: ``write(path, suite, cases)`` with cases of ``Case(name, status, message)``,
status one of "pass", "fail", "skip".

As a command, runs another command as one test case and exits with its status:

    junit.py --out FILE --suite NAME [--name CASE] -- COMMAND [ARG...]

The command's output passes through; a failure records its exit status and the last lines of
its output in the test case.
"""
import argparse
import collections
import os
import subprocess
import sys
from xml.sax.saxutils import escape, quoteattr

Case = collections.namedtuple("Case", "name status message", defaults=("",))

_TAIL_LINES = 40


def write(path, suite, cases):
    """Writes cases (an iterable of Case) as one JUnit test suite named suite to path."""
    cases = list(cases)
    failures = sum(1 for c in cases if c.status == "fail")
    skipped = sum(1 for c in cases if c.status == "skip")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        f.write(f"<testsuites><testsuite name={quoteattr(suite)} tests=\"{len(cases)}\" "
                f"failures=\"{failures}\" skipped=\"{skipped}\">\n")
        for c in cases:
            f.write(f"<testcase classname={quoteattr(suite)} name={quoteattr(c.name)}>")
            first = c.message.splitlines()[0] if c.message else c.status
            if c.status == "fail":
                f.write(f"<failure message={quoteattr(first)}>{escape(c.message)}</failure>")
            elif c.status == "skip":
                f.write(f"<skipped message={quoteattr(first)}/>")
            f.write("</testcase>\n")
        f.write("</testsuite></testsuites>\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JUnit XML file to write")
    ap.add_argument("--suite", required=True, help="test suite name")
    ap.add_argument("--name", help="test case name (default: the suite name)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given")
    tail = collections.deque(maxlen=_TAIL_LINES)
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
    except OSError as e:
        write(args.out, args.suite, [Case(args.name or args.suite, "fail", f"cannot run: {e}")])
        print(f"junit.py: cannot run {command[0]}: {e}", file=sys.stderr)
        return 127
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        tail.append(line)
    rc = proc.wait()
    status = "pass" if rc == 0 else "fail"
    message = "" if rc == 0 else f"exit status {rc}\n" + "".join(tail)
    write(args.out, args.suite, [Case(args.name or args.suite, status, message)])
    return rc


if __name__ == "__main__":
    sys.exit(main())
