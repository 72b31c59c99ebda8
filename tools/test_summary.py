#!/usr/bin/env python3
"""Prints one plain line `N passed, N failed[, N skipped]` from JUnit XML test logs.

Usage: test_summary.py DIR [DIR ...]   (each DIR is searched recursively for test.xml)
Exits 1 if anything failed or nothing ran.

A sharded Bazel test writes one test.xml per shard, in shard_<i>_of_<n>/ below the target's
directory; they are all counted. Results a target's directory holds from an earlier run with
another shard count (or unsharded) are stale and ignored: only the most recently written set
counts. A test that GoogleTest did not run (status="notrun", e.g. DISABLED_) counts as skipped.
"""
import collections
import pathlib
import re
import sys
import xml.etree.ElementTree as ET

SHARD_DIR = re.compile(r"^shard_(\d+)_of_(\d+)$")


def current_logs(root):
    """The test.xml files below root, without stale results of other shard counts."""
    logs = sorted(pathlib.Path(root).rglob("test.xml"))
    # Per target directory: its own test.xml (unsharded) and its shard sets, by shard count.
    sets = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in logs:
        m = SHARD_DIR.match(path.parent.name)
        if m:
            sets[path.parent.parent][int(m.group(2))].append(path)
        else:
            sets[path.parent][0].append(path)
    chosen = []
    for _, by_count in sorted(sets.items()):
        newest = max(by_count.values(), key=lambda paths: max(p.stat().st_mtime for p in paths))
        chosen += newest
    return sorted(chosen)


def count(dirs):
    passed = failed = skipped = 0
    for d in dirs:
        for path in current_logs(d):
            try:
                root = ET.parse(path).getroot()
            except ET.ParseError:
                failed += 1  # a test that crashed before finishing its log
                continue
            for case in root.iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                elif (case.get("result") == "skipped" or case.find("skipped") is not None
                      or case.get("status") == "notrun"):
                    skipped += 1
                else:
                    passed += 1
    return passed, failed, skipped


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    passed, failed, skipped = count(sys.argv[1:])
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
