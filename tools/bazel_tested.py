#!/usr/bin/env python3
"""Prints the test log directory (below bazel-testlogs) of every test target a Bazel run tested.

Usage: bazel_tested.py EVENTS.json   (the run's --build_event_json_file)

One line per target, e.g. ``conformance/conformance_cpu`` for //conformance:conformance_cpu,
whether the run executed the test or took its cached result. bazel-testlogs also holds the logs
of targets that earlier runs tested and this one did not; make test copies only these.
"""
import json
import sys


def tested_dirs(events_path):
    with open(events_path) as f:
        for line in f:
            summary = json.loads(line).get("id", {}).get("testSummary")
            if summary:
                package, _, name = summary["label"].removeprefix("//").partition(":")
                yield f"{package}/{name}" if package else name


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    for path in tested_dirs(sys.argv[1]):
        print(path)
