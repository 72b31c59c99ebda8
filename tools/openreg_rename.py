#!/usr/bin/env python3
"""Copies PyTorch's OpenReg tests onto a torch_hal device by mechanical renames only.

PyTorch tests its out-of-tree (PrivateUse1) backend support with a reference backend, OpenReg,
and the suite in test/cpp_extensions/open_registration_extension/torch_openreg/tests. The files
are kept verbatim in bridge/tests/openreg_upstream/ (SOURCES.md names the upstream commit of
each). This script writes copies of them into an output directory with the device renamed:
the device string "openreg" becomes the device given by --device ("hal" for the cpu backend,
"neuron" for the trainium backend), the module torch_openreg becomes torch_hal, torch.openreg
becomes torch.<device>, and so on. Every substitution is one regex of RENAMES below, applied in
that order to the whole text of every file; nothing else in a test is changed. Per file the
script prints how many substitutions each rule made, and the occurrences of "openreg" (any
case) that no rule touched, so that whatever cannot be renamed is visible.

What cannot be renamed stays as it is: OpenReg's custom operators (torch.ops.openreg.*, renamed
like the rest, exist only in OpenReg's extension), its "occl" process group, its backend-meta
hooks, and the pickled bytes in test_storage.py whose location string "openreg:0" has its length
encoded in the pickle. Those cases fail on a torch_hal device; RESULTS.md lists them.

Usage:
    python3 tools/openreg_rename.py --device hal /tmp/openreg_hal
    TORCH_HAL_BACKEND=cpu python3 -m pytest /tmp/openreg_hal/test_device.py
"""

import argparse
import os
import re
import sys

# (name, pattern, replacement, reason). The replacement is a format string: {dev} is the device
# name (e.g. "hal"), {DEV} the device name in upper case. Applied in this order.
RENAMES = [
    ("import", r"\bimport torch_openreg\b", "import torch_hal",
     "the import line: OpenReg's Python package is torch_openreg, the bridge's is torch_hal"),
    ("module", r"\btorch_openreg\b", "torch_hal",
     "other uses of the package name (attribute uses, comments)"),
    ("op_namespace", r"\btorch\.ops\.openreg\b", "torch.ops.{dev}",
     "OpenReg's custom-operator namespace; renamed like the rest, torch_hal has no such ops"),
    ("device_module", r"\btorch\.openreg\b", "torch.{dev}",
     "the device module torch registers under the backend's name (torch.<device>)"),
    ("device_string", r"""(?<=["'])openreg(?=["':])""", "{dev}",
     "device strings: \"openreg\", \"openreg:N\", f\"openreg:{i}\", only_for=(\"openreg\",)"),
    ("is_method", r"\bis_openreg\b", "is_{dev}",
     "the is_<device> property generate_methods_for_privateuse1_backend() adds"),
    ("to_method", r"\.openreg\(", ".{dev}(",
     "the .<device>() method generate_methods_for_privateuse1_backend() adds"),
    ("upper_alias", r"\bOPENREG(?![A-Za-z0-9])", "{DEV}",
     "ProfilerActivity/DeviceType aliases torch names after the backend, in upper case (and "
     "upper-case names built on it: OPENREG_OPS, comments)"),
    ("display_name", r"OpenReg", "{dev}",
     "the device's name in messages and comments (torch_hal's messages use the device type "
     "name, e.g. \"Cannot re-initialize hal in forked subprocess\")"),
    ("other_lower", r"(?<![A-Za-z0-9\\])openreg", "{dev}",
     "every other lower-case use: local variable names, record_function labels, messages that "
     "embed the device name; not after a letter or digit, which leaves pickled bytes alone"),
]

_COMPILED = [(name, re.compile(pattern), repl, reason)
             for name, pattern, repl, reason in RENAMES]

_LEFT = re.compile(r"openreg", re.IGNORECASE)


def default_source_dir():
    """bridge/tests/openreg_upstream/ of the repository this script is in."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, "bridge", "tests", "openreg_upstream")


def rename_text(text, device):
    """Applies RENAMES to text; returns the new text and {rule name: substitution count}."""
    counts = {}
    for name, regex, repl, _ in _COMPILED:
        replacement = repl.format(dev=device, DEV=device.upper())
        text, n = regex.subn(lambda _m, r=replacement: r, text)
        counts[name] = n
    return text, counts


def left_over(text):
    """Lines of text in which "openreg" (any case) remains, as (line number, line)."""
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1)
            if _LEFT.search(line)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", help="directory to write the renamed test files into")
    parser.add_argument("--device",
                        help='device name that replaces "openreg" (e.g. hal, neuron)')
    parser.add_argument("--src", default=default_source_dir(),
                        help="directory of the verbatim upstream files (default: %(default)s)")
    parser.add_argument("--rules", action="store_true",
                        help="print the rename table and exit")
    args = parser.parse_args(argv)

    if args.rules:
        for name, pattern, repl, reason in RENAMES:
            print(f"{name:14} {pattern!r:40} -> {repl!r:22} {reason}")
        return 0
    if not args.outdir or not args.device:
        parser.error("outdir and --device are required (unless --rules)")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", args.device):
        parser.error(f"--device {args.device!r}: expected a lower-case device type name")

    files = sorted(f for f in os.listdir(args.src) if f.startswith("test_") and f.endswith(".py"))
    if not files:
        parser.error(f"no test_*.py files in {args.src}")
    os.makedirs(args.outdir, exist_ok=True)

    totals = dict.fromkeys((r[0] for r in RENAMES), 0)
    for fname in files:
        with open(os.path.join(args.src, fname), encoding="utf-8", newline="") as f:
            text = f.read()
        new_text, counts = rename_text(text, args.device)
        with open(os.path.join(args.outdir, fname), "w", encoding="utf-8", newline="") as f:
            f.write(new_text)
        made = ", ".join(f"{k}={v}" for k, v in counts.items() if v)
        print(f"{fname}: {sum(counts.values())} substitutions ({made or 'none'})")
        for lineno, line in left_over(new_text):
            print(f"    left as is, line {lineno}: {line[:100]}")
        for k, v in counts.items():
            totals[k] += v
    print(f"total: {sum(totals.values())} substitutions in {len(files)} files ("
          + ", ".join(f"{k}={v}" for k, v in totals.items()) + f") -> {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
