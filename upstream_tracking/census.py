#!/usr/bin/env python3
"""Census of CUDA hardcoding in PyTorch's Python sources.

    python3 upstream_tracking/census.py [TREE] [--series] [--list] [--json FILE]

TREE is a torch tree: a ``site-packages`` directory, a torch package directory or a PyTorch
checkout (default: the installed torch). With ``--series`` the census also applies the patch
series (``patches/series``) to a temporary copy of TREE's Python sources and prints the counts
before and after it.

Every ``torch/**/*.py`` file is parsed (``ast``; comments and docstrings never count) and each
site is put into one category:

  default-device-cuda         a ``device``/``device_type`` parameter defaulting to "cuda"
  cuda-availability-check     ``torch.cuda.is_available()`` / ``device_count()`` deciding
                              generic behaviour
  cudart-call                 the CUDA runtime called from Python (``torch.cuda.cudart()``,
                              ``torch.cuda._pin_memory_utils``)
  cuda-module-call            any other ``torch.cuda.*`` call (synchronize, current_device, ...)
  cuda-module-fallback        ``getattr(torch, name, torch.cuda)``
  cuda-device-comparison      a comparison with "cuda" (``device.type == "cuda"``, ...)
  device-list-without-pu1     a literal list of device types with "cuda" but not the
                              PrivateUse1 name
  privateuse1-literal         a comparison with "privateuse1" (never the device's type)

Sites in device-specific modules (``torch/cuda``, cuDNN, hipify, ...) and sites listed in
``census_allowlist.txt`` (legitimately CUDA-specific, e.g. NCCL-only branches) are counted as
``allowlisted`` and kept out of the totals. The rest is grouped by area; the compile stack
(``torch._inductor``, ``torch._dynamo``, ...) and the test utilities are reported separately from
the eager runtime, which is what the series targets.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "patches" / "tools"))
import halpatch  # noqa: E402

CATEGORIES = [
    "default-device-cuda",
    "cuda-availability-check",
    "cudart-call",
    "cuda-module-call",
    "cuda-module-fallback",
    "cuda-device-comparison",
    "device-list-without-pu1",
    "privateuse1-literal",
]

# Modules whose job is one vendor's device: CUDA hardcoding there is by design.
DEVICE_SPECIFIC = (
    "torch/cuda/",
    "torch/backends/cuda/",
    "torch/backends/cudnn/",
    "torch/backends/cusparselt/",
    "torch/backends/nccl/",
    "torch/utils/hipify/",
    "torch/utils/cpp_extension.py",
    "torch/utils/_cuda_debug.py",
    "torch/utils/collect_env.py",
    "torch/_vendor/",
    "torch/_native/",
    "torch/sparse/_triton_ops",
    "torch/sparse/_semi_structured",
    "torch/profiler/_cupti_monitor.py",
    "torch/distributed/_symmetric_memory/",
    "torch/nn/attention/_fa3.py",
    "torch/nn/attention/_fa4.py",
    "torch/numa/",
    "torch/utils/viz/",
)

AREAS = [
    ("compile stack", ("torch/_inductor/", "torch/_dynamo/", "torch/_functorch/", "torch/_prims",
                       "torch/_higher_order_ops/", "torch/_export/", "torch/export/", "torch/fx/",
                       "torch/_meta_registrations.py", "torch/_decomp/", "torch/_refs/",
                       "torch/_subclasses/", "torch/compiler/", "torch/_library/",
                       "torch/utils/_triton.py", "torch/utils/_pallas.py", "torch/jit/",
                       "torch/onnx/", "torch/ao/", "torch/_guards.py", "torch/_logging/",
                       "torch/_utils_internal.py", "torch/utils/_content_store.py",
                       "torch/_strobelight/", "torch/nn/attention/flex_attention.py",
                       "torch/nn/attention/experimental/")),
    ("test utilities", ("torch/testing/",)),
    ("benchmarks and tools", ("torch/utils/benchmark/", "torch/utils/bottleneck/",
                              "torch/distributed/_tools/", "torch/utils/_debug_mode/")),
    ("distributed", ("torch/distributed/",)),
    ("eager runtime", ("torch/",)),
]

DEVICE_NAMES = {"cuda", "xpu", "mps", "hpu", "mtia", "xla", "maia", "cpu", "meta", "ipu", "lazy"}
PU1_MARKERS = ("_get_privateuse1_backend_name", "_privateuse1_backend_name")


def area_of(rel: str) -> str:
    for name, prefixes in AREAS:
        if rel.startswith(prefixes):
            return name
    return "eager runtime"


class Visitor(ast.NodeVisitor):
    def __init__(self, rel: str):
        self.rel = rel
        self.stack: list[str] = []
        self.sites: list[dict] = []
        self._in_test = 0

    def add(self, node, category, snippet):
        self.sites.append({
            "path": self.rel,
            "line": node.lineno,
            "scope": ".".join(self.stack) or "<module>",
            "category": category,
            "code": snippet[:120],
        })

    def _scoped(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    def visit_ClassDef(self, node):
        self._scoped(node)

    def visit_FunctionDef(self, node):
        self.stack.append(node.name)
        a = node.args
        pos = a.posonlyargs + a.args
        pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults))
        pairs += [(x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for arg, d in pairs:
            if isinstance(d, ast.Constant) and d.value == "cuda" and "device" in arg.arg:
                self.add(node, "default-device-cuda", f"def {node.name}(..., {arg.arg}='cuda')")
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        func = ast.unparse(node.func)
        if func in ("torch.cuda.is_available", "torch.cuda.device_count") or func.startswith(
            "torch.cuda.amp.common.amp_definitely_not_available"
        ):
            self.add(node, "cuda-availability-check", ast.unparse(node))
        elif (
            func == "torch.cuda.cudart"
            or (".cudaHostRegister" in func and "torch.cuda.cudart" not in func)
            or func.startswith("pin_memory_utils.")
        ):
            self.add(node, "cudart-call", ast.unparse(node))
        elif "torch.cuda.cudart" in func:
            pass  # a call on torch.cuda.cudart()'s result: counted with that call
        elif func.startswith("torch.cuda.") and not func.startswith("torch.cuda.amp.autocast"):
            self.add(node, "cuda-module-call", ast.unparse(node))
        elif func == "getattr" and len(node.args) == 3 and ast.unparse(node.args[2]) == "torch.cuda":
            self.add(node, "cuda-module-fallback", ast.unparse(node))
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            if alias.name == "torch.cuda._pin_memory_utils":
                self.add(node, "cudart-call", f"import {alias.name}")
        self.generic_visit(node)

    def visit_Compare(self, node):
        consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
        if "cuda" in consts:
            self.add(node, "cuda-device-comparison", ast.unparse(node))
        elif "privateuse1" in consts:
            self.add(node, "privateuse1-literal", ast.unparse(node))
        self.generic_visit(node)

    def _collection(self, node):
        strs = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        devs = [s for s in strs if s in DEVICE_NAMES]
        if "cuda" in devs and len(devs) >= 2 and len(devs) == len(strs):
            src = ast.unparse(node)
            if not any(m in src for m in PU1_MARKERS):
                self.add(node, "device-list-without-pu1", src)
        self.generic_visit(node)

    visit_List = visit_Tuple = visit_Set = _collection


def load_allowlist(path: Path) -> list[tuple[str, str, str]]:
    out = []
    if not path.exists():
        return out
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        loc, category = line.split()
        file, _, scope = loc.partition("::")
        out.append((file, scope or "*", category))
    return out


def allowlisted(site: dict, allow: list[tuple[str, str, str]]) -> bool:
    if site["path"].startswith(DEVICE_SPECIFIC):
        return True
    for file, scope, category in allow:
        same_file = site["path"] == file or (file.endswith("/") and site["path"].startswith(file))
        if same_file and category in (site["category"], "*") and (
            scope == "*" or site["scope"] == scope or site["scope"].startswith(scope + ".")
        ):
            return True
    return False


def scan(root: Path, allow) -> list[dict]:
    sites = []
    torch_dir = root / "torch"
    for dirpath, dirnames, filenames in os.walk(torch_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            try:
                tree = ast.parse(p.read_text(encoding="utf-8", errors="replace"))
            except SyntaxError:
                continue
            v = Visitor(rel)
            v.visit(tree)
            for s in v.sites:
                s["area"] = "allowlisted" if allowlisted(s, allow) else area_of(rel)
            sites.extend(v.sites)
    return sites


def counts(sites):
    c = collections.Counter()
    for s in sites:
        c[(s["area"], s["category"])] += 1
    return c


def copy_sources(src_root: Path, dest: Path):
    for dirpath, dirnames, filenames in os.walk(src_root / "torch"):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            if f.endswith(".py"):
                s = Path(dirpath) / f
                d = dest / s.relative_to(src_root)
                d.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(s, d)


def print_table(title, before, after=None):
    areas = [a for a, _ in AREAS] + ["allowlisted"]
    cols = ["before", "after", "removed"] if after is not None else ["sites"]
    print(title)
    width = max(len(c) for c in CATEGORIES) + 2
    for area in areas:
        rows = []
        for cat in CATEGORIES:
            b = before.get((area, cat), 0)
            a = after.get((area, cat), 0) if after is not None else None
            if b or a:
                rows.append((cat, b, a))
        if not rows:
            continue
        tb = sum(r[1] for r in rows)
        ta = sum(r[2] for r in rows) if after is not None else None
        head = f"  {area}: {tb}" + (f" -> {ta}" if after is not None else "")
        print(head)
        for cat, b, a in rows:
            if after is None:
                print(f"    {cat:<{width}}{b:>6}")
            else:
                print(f"    {cat:<{width}}{b:>6} -> {a:<6}" + (f" ({a - b:+d})" if a != b else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", nargs="?", help="torch tree (default: the installed torch)")
    ap.add_argument("--series", action="store_true", help="also count after applying the series")
    ap.add_argument("--series-dir", type=Path, default=REPO / "patches")
    ap.add_argument("--allowlist", type=Path, default=HERE / "census_allowlist.txt")
    ap.add_argument("--list", choices=("all", "removed", "remaining"),
                    help="print the sites (remaining: not allowlisted, eager runtime + distributed)")
    ap.add_argument("--json", type=Path, help="write the sites and counts as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    args = ap.parse_args(argv)

    root = halpatch.resolve_target(args.tree or halpatch.installed_torch_root(), "tree").root
    allow = load_allowlist(args.allowlist)
    version = halpatch.torch_version(root)
    before = scan(root, allow)
    after = None
    if args.series:
        _, patches = halpatch.read_series(args.series_dir)
        states = halpatch.series_status(root, patches)
        if any(s != "not applied" for s, _ in states):
            print(f"note: {root} already has series patches applied: " +
                  ", ".join(f"{p.number}={s}" for p, (s, _) in zip(patches, states)))
        with tempfile.TemporaryDirectory(prefix="census-") as td:
            copy_sources(root, Path(td))
            r = subprocess.run(
                [sys.executable, str(REPO / "patches" / "tools" / "halpatch.py"), "--series-dir",
                 str(args.series_dir), "apply", "--mode", "tree", td],
                capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                return 1
            after = scan(Path(td), allow)

    cb = counts(before)
    ca = counts(after) if after is not None else None
    print(f"census of torch {version} ({root})")
    if args.markdown:
        print_markdown(cb, ca)
    else:
        print_table("sites by area and category" + (" (before -> after the series)" if ca else ""), cb, ca)
    generic = [a for a, _ in AREAS]
    tb = sum(v for (a, _), v in cb.items() if a in generic)
    line = f"total outside allowlisted code: {tb}"
    focus = ("eager runtime", "distributed")
    fb = sum(v for (a, _), v in cb.items() if a in focus)
    if ca is not None:
        ta = sum(v for (a, _), v in ca.items() if a in generic)
        fa = sum(v for (a, _), v in ca.items() if a in focus)
        line += f" -> {ta} ({ta - tb:+d}); eager runtime + distributed: {fb} -> {fa} ({fa - fb:+d})"
    else:
        line += f"; eager runtime + distributed: {fb}"
    print(line)

    if args.list:
        key = lambda s: (s["path"], s["scope"], s["category"], s["code"])  # noqa: E731
        if args.list == "removed" and after is not None:
            remaining = collections.Counter(key(s) for s in after)
            listed = []
            for s in before:
                if remaining[key(s)]:
                    remaining[key(s)] -= 1
                else:
                    listed.append(s)
        elif args.list == "remaining":
            listed = [s for s in (after if after is not None else before) if s["area"] in focus]
        else:
            listed = before
        for s in listed:
            print(f"{s['path']}:{s['line']}  [{s['category']}] {s['scope']}: {s['code']}")
    if args.json:
        args.json.write_text(json.dumps({
            "torch": version,
            "before": before,
            "after": after,
        }, indent=1))
    return 0


def print_markdown(cb, ca):
    areas = [a for a, _ in AREAS] + ["allowlisted"]
    hdr = "| area | category | before | after |" if ca is not None else "| area | category | sites |"
    print(hdr)
    print("|---|---|---|---|" if ca is not None else "|---|---|---|")
    for area in areas:
        for cat in CATEGORIES:
            b = cb.get((area, cat), 0)
            a = ca.get((area, cat), 0) if ca is not None else None
            if b or a:
                print(f"| {area} | {cat} | {b} |" + (f" {a} |" if ca is not None else ""))


if __name__ == "__main__":
    sys.exit(main())
