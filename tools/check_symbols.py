#!/usr/bin/env python3
"""Checks the dynamic symbols of the HAL's shared libraries against what they may export.

    check_symbols.py --hal LIBHAL --headers DIR [--backend LIB ...]

libhal.so.1 must export exactly the functions the public headers in DIR declare with HAL_API,
each under the version node HAL_<major>, and carry the SONAME libhal.so.<major>. Each backend
library must export exactly one symbol: its entry point, hal_backend_get_ops. Prints every extra
or missing symbol and exits 1 if there is any; exits 2 if a tool or file is missing.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

API_RE = re.compile(r"\bHAL_API\b[^;{]*?\b(hal_\w+)\s*\(", re.S)
MAJOR_RE = re.compile(r"#define\s+HAL_API_VERSION_MAJOR\s+(\d+)")
ENTRY = "hal_backend_get_ops"


def public_functions(headers):
    names = set()
    for path in sorted(glob.glob(os.path.join(headers, "*.h"))):
        with open(path) as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # HAL_API in comments is no declaration
        names.update(API_RE.findall(text))
    return names


def api_major(headers):
    with open(os.path.join(headers, "hal_version.h")) as f:
        m = MAJOR_RE.search(f.read())
    if not m:
        raise RuntimeError("HAL_API_VERSION_MAJOR not found in hal_version.h")
    return int(m.group(1))


def exported(lib):
    """{name: version or None} of the defined dynamic symbols (version nodes excluded)."""
    nm = shutil.which("nm")
    if not nm:
        raise RuntimeError("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    symbols = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[1] == "A":  # "A": the version node itself
            continue
        # A local symbol (lower case but for the weak and unique ones) binds nothing outside the
        # library; the linker lists hidden thread-locals that TLS descriptors refer to.
        if fields[1].islower() and fields[1] not in "uvw":
            continue
        name, _, version = fields[2].partition("@")
        symbols[name] = version.lstrip("@") or None
    return symbols


def soname(lib):
    out = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return m.group(1) if m else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hal", required=True, help="libhal.so.1")
    parser.add_argument("--headers", required=True, help="the public headers (hal/include/hal)")
    parser.add_argument("--backend", action="append", default=[], help="a backend library")
    args = parser.parse_args(argv)
    problems = []
    try:
        declared = public_functions(args.headers)
        major = api_major(args.headers)
        symbols = exported(args.hal)
        name = soname(args.hal)
        if not declared:
            problems.append(f"no HAL_API declarations found in {args.headers}")
        for extra in sorted(set(symbols) - declared):
            problems.append(f"{os.path.basename(args.hal)} exports {extra}, which no public "
                            "header declares with HAL_API")
        for missing in sorted(declared - set(symbols)):
            problems.append(f"{os.path.basename(args.hal)} does not export {missing}, declared "
                            "with HAL_API")
        for sym, version in sorted(symbols.items()):
            if sym in declared and version != f"HAL_{major}":
                problems.append(f"{sym} has version {version}, expected HAL_{major}")
        if name != f"libhal.so.{major}":
            problems.append(f"{os.path.basename(args.hal)} has SONAME {name}, expected "
                            f"libhal.so.{major}")
        print(f"{os.path.basename(args.hal)}: {len(symbols)} exported, {len(declared)} declared")
        for lib in args.backend:
            syms = exported(lib)
            if set(syms) != {ENTRY}:
                problems.append(f"{os.path.basename(lib)} exports {sorted(syms)}; a backend "
                                f"exports {ENTRY} only")
            print(f"{os.path.basename(lib)}: {len(syms)} exported")
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"check_symbols: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
