#!/usr/bin/env python3
"""tools/triton_aot.py without a GPU: the conformance suite's Triton kernel compiled for sm_90 is
a CUDA ELF holding the kernel, described by a .launch file as program.triton_cubin reads it; a
kernel that fails to compile, and a missing triton package, are errors that say so.

    triton_aot_test.py TOOL MODULE
"""

import os
import struct
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

EM_CUDA = 190


def run(tool, module, out, extra_env=None):
    env = dict(os.environ, TRITON_CACHE_DIR=str(out / "cache"), **(extra_env or {}))
    return subprocess.run([sys.executable, tool, "--arch", "90", "--out", str(out), str(module)],
                          capture_output=True, text=True, env=env, timeout=600)


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def main():
    tool, module = sys.argv[1], Path(sys.argv[2])
    tmp = Path(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)

    out = tmp / "ok"
    r = run(tool, module, out)
    check(r.returncode == 0, f"the fixture compiles (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    cubin = (out / "cts_triton_add.cubin").read_bytes()
    check(cubin[:4] == b"\x7fELF", "the cubin is an ELF file")
    (machine,) = struct.unpack_from("<H", cubin, 18)
    check(machine == EM_CUDA, f"its machine is EM_CUDA (190), not {machine}")
    (flags,) = struct.unpack_from("<I", cubin, 48)
    check(90 in ((flags >> 8) & 0xFF, flags & 0xFF), f"its flags 0x{flags:x} name sm_90")
    check(b"cts_triton_add" in cubin, "it holds the kernel cts_triton_add")
    launch = dict(line.split(" ", 1) for line in
                  (out / "cts_triton_add.launch").read_text().splitlines())
    expected = {"kernel": "cts_triton_add", "arch": "sm_90", "threads": "128", "shared": "0",
                "args": "p p p 4 p p", "scratch": "2", "constexpr": "BLOCK 128"}
    for key, value in expected.items():
        check(launch.get(key) == value, f".launch {key}: {launch.get(key)!r}, expected {value!r}")
    check("triton" in launch, ".launch names the Triton version")

    # A kernel that does not compile: exit 1, naming it.
    bad = tmp / "bad_kernels.py"
    bad.write_text(textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def broken(x_ptr, n):
            tl.store(x_ptr, tl.no_such_function(n))

        AOT = {"broken": dict(fn=broken, signature={"x_ptr": "*fp32", "n": "i32"})}
        """))
    r = run(tool, bad, tmp / "bad")
    check(r.returncode == 1 and "broken:" in r.stderr, f"a broken kernel fails by name:\n{r.stderr}")

    # Without the triton package: exit 1, saying how to install it.
    shadow = tmp / "shadow"
    shadow.mkdir(exist_ok=True)
    (shadow / "triton.py").write_text("raise ImportError('no triton here')\n")
    r = run(tool, module, tmp / "none", {"PYTHONPATH": str(shadow)})
    check(r.returncode == 1 and "pip install triton" in r.stderr,
          f"a missing triton package is named:\n{r.stderr}")
    print("triton_aot_test: passed")


if __name__ == "__main__":
    main()
