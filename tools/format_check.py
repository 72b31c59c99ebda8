#!/usr/bin/env python3
"""Checks every tracked C/C++ file against .clang-format.

Usage: format_check.py [--junit FILE]
Prints the files that need `make format`; with --junit, also writes one JUnit test case per
file so the check counts in the test summary. Exits 1 if any file needs formatting.
"""
import argparse
import subprocess
import sys
from xml.sax.saxutils import quoteattr


def tracked_sources():
    out = subprocess.run(["git", "ls-files", "*.c", "*.h", "*.cc", "*.cpp"],
                         check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--junit", help="write JUnit XML here")
    args = parser.parse_args()
    bad = []
    files = tracked_sources()
    for path in files:
        result = subprocess.run(["clang-format", "--dry-run", "-Werror", path],
                                capture_output=True, text=True)
        if result.returncode != 0:
            bad.append(path)
    if args.junit:
        with open(args.junit, "w") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n')
            f.write(f'<testsuites><testsuite name="clang-format" tests="{len(files)}" '
                    f'failures="{len(bad)}">\n')
            for path in files:
                f.write(f'<testcase classname="clang-format" name={quoteattr(path)}>')
                if path in bad:
                    f.write('<failure message="needs clang-format (make format)"/>')
                f.write('</testcase>\n')
            f.write('</testsuite></testsuites>\n')
    if bad:
        print("clang-format: these files need formatting (make format):")
        print("\n".join(bad))
        return 1
    print(f"clang-format: {len(files)} files formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
