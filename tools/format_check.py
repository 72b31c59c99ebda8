#!/usr/bin/env python3
"""Checks every tracked C/C++ file against .clang-format.

Usage: format_check.py [--junit FILE]
Prints the files that need `make format`; with --junit, also writes one JUnit test case per
file so the check counts in the test summary. Exits 1 if any file needs formatting.
"""
import argparse
import subprocess
import sys

import junit


def tracked_sources():
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          "*.c", "*.h", "*.cc", "*.cpp"],
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
        junit.write(args.junit, "clang-format",
                    [junit.Case(path, "fail" if path in bad else "pass",
                                "needs clang-format (make format)" if path in bad else "")
                     for path in files])
    if bad:
        print("clang-format: these files need formatting (make format):")
        print("\n".join(bad))
        return 1
    print(f"clang-format: {len(files)} files formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
