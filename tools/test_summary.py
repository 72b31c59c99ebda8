#!/usr/bin/env python3
"""Prints one plain line `N passed, N failed[, N skipped]` from JUnit XML test logs.

Usage: test_summary.py DIR [DIR ...]   (each DIR is searched recursively for test.xml)
Exits 1 if anything failed or nothing ran.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def count(dirs):
    passed = failed = skipped = 0
    for d in dirs:
        for path in sorted(pathlib.Path(d).rglob("test.xml")):
            try:
                root = ET.parse(path).getroot()
            except ET.ParseError:
                failed += 1  # a test that crashed before finishing its log
                continue
            for case in root.iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    failed += 1
                elif case.get("result") == "skipped" or case.find("skipped") is not None:
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
