#!/usr/bin/env python3
"""Compiles Triton kernels ahead of time to cubin for one CUDA architecture, without a GPU.

    python3 tools/triton_aot.py --arch 90 --out DIR MODULE.py

MODULE.py defines ``AOT = {name: dict(fn=<@triton.jit function>, signature={arg: type},
constexprs={arg: value})}`` (conformance/fixtures/triton_kernels.py). For each kernel the tool
writes DIR/<name>.cubin and DIR/<name>.launch, a text file that says how to launch the cubin
through the HAL's program API (hal_program_create with HAL_PROGRAM_FORMAT_CUBIN):

    kernel <entry name in the cubin>
    arch sm_<arch>
    threads <threads per block: num_warps x 32>
    shared <dynamic shared memory bytes>
    args <one letter per kernel parameter: p a pointer, or the scalar's size in bytes>
    scratch <how many of the last pointer parameters are Triton's scratch buffers (pass NULL)>
    constexpr <name> <value>          (one line each)
    triton <the version that compiled it>

Triton appends scratch-buffer pointers (global and profile scratch) to every kernel's
parameters; they may be NULL when the kernel needs no scratch memory, which is checked here (a
kernel that needs some is refused: its launcher would have to allocate it). Compilation uses
Triton's bundled ptxas; TRITON_CACHE_DIR is honoured. Exit status: 0, or 1 with the reason
(the triton package missing, a kernel that fails to compile).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from pathlib import Path

# Bytes of Triton's scalar argument types.
SCALAR_BYTES = {"i1": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "fp16": 2, "bf16": 2, "i32": 4,
                "u32": 4, "fp32": 4, "i64": 8, "u64": 8, "fp64": 8}


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def arg_letters(signature: dict) -> list[str]:
    letters = []
    for name, kind in signature.items():
        if kind == "constexpr":
            continue
        if kind.startswith("*"):
            letters.append("p")
        elif kind in SCALAR_BYTES:
            letters.append(str(SCALAR_BYTES[kind]))
        else:
            raise ValueError(f"argument {name}: unsupported Triton type {kind!r}")
    return letters


def ptx_param_count(ptx: str, entry: str) -> int:
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    if not m:
        raise ValueError(f"no .entry {entry} in the PTX Triton produced")
    return len(re.findall(r"\.param\s", m.group(1)))


def compile_one(name: str, spec: dict, arch: int, out: Path) -> str:
    import triton
    from triton.backends.compiler import GPUTarget

    src = triton.compiler.ASTSource(fn=spec["fn"], signature=spec["signature"],
                                    constexprs=spec.get("constexprs", {}))
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32))
    md = kernel.metadata
    for scratch in ("global_scratch_size", "profile_scratch_size"):
        if getattr(md, scratch, 0):
            raise ValueError(f"{name} needs {getattr(md, scratch)} bytes of {scratch[:-5]}; "
                             "its launcher would have to allocate them")
    letters = arg_letters(spec["signature"])
    params = ptx_param_count(kernel.asm["ptx"], md.name)
    scratch = params - len(letters)
    if scratch < 0:
        raise ValueError(f"{name}: the PTX has {params} parameters, fewer than its "
                         f"{len(letters)} arguments")
    letters += ["p"] * scratch
    (out / f"{name}.cubin").write_bytes(kernel.asm["cubin"])
    lines = [f"kernel {md.name}", f"arch sm_{arch}", f"threads {md.num_warps * 32}",
             f"shared {md.shared}", "args " + " ".join(letters), f"scratch {scratch}"]
    lines += [f"constexpr {k} {v}" for k, v in spec.get("constexprs", {}).items()]
    lines.append(f"triton {triton.__version__}")
    (out / f"{name}.launch").write_text("\n".join(lines) + "\n")
    return f"{name}: {md.name}, sm_{arch}, {md.num_warps * 32} threads, {md.shared} B shared, " \
           f"args {' '.join(letters)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", type=Path, help="a Python file defining AOT")
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability, e.g. 90")
    ap.add_argument("--out", type=Path, required=True, help="output directory")
    args = ap.parse_args(argv)
    # Triton's current default, said explicitly (it warns that the default will change).
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    try:
        import triton  # noqa: F401
    except ImportError as e:
        print(f"triton_aot: the triton package is not installed ({e}); "
              "`python3 -m pip install triton` installs it", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    module = load_module(args.module)
    for name, spec in module.AOT.items():
        try:
            print("triton_aot: " + compile_one(name, spec, args.arch, args.out))
        except Exception as e:  # a compile error names the kernel, whatever raised it
            print(f"triton_aot: {name}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
