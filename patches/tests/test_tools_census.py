"""Tests of upstream_tracking/census.py on a small synthetic torch tree."""

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "upstream_tracking"))
import census  # noqa: E402

SOURCE = '''
import torch
import torch.cuda._pin_memory_utils as pin_memory_utils

def scaler(device: str = "cuda"):
    """torch.cuda.is_available() in a docstring does not count"""
    # torch.cuda.synchronize() in a comment does not count
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    mod = getattr(torch, device, torch.cuda)
    return device == "cuda" or mod

def pin(t):
    torch.cuda.cudart().cudaHostRegister(t.data_ptr(), 4, 1)

def lists(t):
    a = t.device.type in ("cuda", "xpu")
    b = t.device.type in ("cuda", "xpu", torch._C._get_privateuse1_backend_name())
    return a, b, t.device.type == "privateuse1"
'''


def make_tree(root: Path, allowlist_text: str = "") -> Path:
    for rel in ("torch/amp/thing.py", "torch/distributed/thing.py", "torch/cuda/thing.py"):
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(SOURCE)
    (root / "torch" / "__init__.py").write_text("")
    allow = root / "allow.txt"
    allow.write_text(textwrap.dedent(allowlist_text))
    return allow


def by_category(sites, path):
    out = {}
    for s in sites:
        if s["path"] == path:
            out[s["category"]] = out.get(s["category"], 0) + 1
    return out


def test_categories_and_areas(tmp_path):
    allow = make_tree(tmp_path)
    sites = census.scan(tmp_path, census.load_allowlist(allow))
    cats = by_category(sites, "torch/amp/thing.py")
    assert cats == {
        "cudart-call": 2,  # the import and torch.cuda.cudart()
        "default-device-cuda": 1,
        "cuda-availability-check": 1,
        "cuda-module-call": 1,
        "cuda-module-fallback": 1,
        "cuda-device-comparison": 1,
        "device-list-without-pu1": 1,
        "privateuse1-literal": 1,
    }
    areas = {s["path"]: s["area"] for s in sites}
    assert areas["torch/amp/thing.py"] == "eager runtime"
    assert areas["torch/distributed/thing.py"] == "distributed"
    assert areas["torch/cuda/thing.py"] == "allowlisted"  # device-specific module


def test_allowlist_entries(tmp_path):
    allow = make_tree(tmp_path, """\
        torch/amp/thing.py::pin   cudart-call   # CUDA only by design
        torch/distributed/        *
    """)
    sites = census.scan(tmp_path, census.load_allowlist(allow))
    amp = [s for s in sites if s["path"] == "torch/amp/thing.py"]
    allowed = {(s["scope"], s["category"]) for s in amp if s["area"] == "allowlisted"}
    assert allowed == {("pin", "cudart-call")}
    assert all(s["area"] == "allowlisted" for s in sites if s["path"].startswith("torch/distributed/"))


def test_cli_runs_on_a_tree(tmp_path):
    allow = make_tree(tmp_path)
    r = subprocess.run([sys.executable, str(REPO / "upstream_tracking" / "census.py"), str(tmp_path),
                        "--allowlist", str(allow), "--list", "all"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "eager runtime + distributed: 18" in r.stdout
    assert "torch/amp/thing.py" in r.stdout


def test_backend_map_lookup_guards(tmp_path):
    # a lookup is a site unless a try handles its KeyError or a membership test guards its key
    f = tmp_path / "torch" / "distributed" / "c10d.py"
    f.parent.mkdir(parents=True)
    f.write_text(textwrap.dedent('''
        def init(acc, other):
            if acc in Backend.default_device_backend_map and acc != "cpu":
                a = Backend.default_device_backend_map[acc]          # guarded by the if
            b = acc in Backend.default_device_backend_map and Backend.default_device_backend_map[acc]
            c = (Backend.default_device_backend_map[acc]
                 if acc in Backend.default_device_backend_map else None)
            try:
                d = Backend.default_device_backend_map[other]        # guarded by the try
            except KeyError:
                d = None
            if other in Backend.default_device_backend_map:
                pass
            else:
                e = Backend.default_device_backend_map[other]        # site: the else branch
            if other in Backend.default_device_backend_map:
                g = Backend.default_device_backend_map[acc]          # site: another key
            return Backend.default_device_backend_map[acc]           # site: unguarded
    '''))
    (tmp_path / "torch" / "__init__.py").write_text("")
    sites = census.scan(tmp_path, [])
    lines = sorted(s["line"] for s in sites if s["category"] == "backend-map-lookup")
    assert lines == [15, 17, 18]


# The categories widened by issue 14, with what each must not count. The file sits in
# torch/nn/, so `from ..cuda import ...` is an import of torch.cuda.
WIDENED = '''
from typing import TYPE_CHECKING

import torch
import torch.cuda                                    # no: its uses are torch.cuda.* sites
import torch.cuda.nvtx as nvtx                       # cuda-module-import
from torch.cuda import nccl                          # cuda-module-import
from torch.cuda.amp import autocast as cuda_autocast  # cuda-module-import
from ..cuda import _utils                            # cuda-module-import (relative)
from ..amp import autocast                           # no

if TYPE_CHECKING:
    from torch.cuda import Stream                    # no: never imported at run time

def f(t, i, device="cuda:0"):                        # default-device-cuda, not also a literal
    a = t.is_cuda                                    # is-cuda-attribute
    b = torch.Tensor.is_cuda                         # no: the property itself
    c = torch.device("cuda")                         # cuda-device-literal
    d = torch.device("cuda", i)                      # cuda-device-literal
    e = torch.device(f"cuda:{i}")                    # cuda-device-literal (one site)
    g = t.to("cuda:1")                               # cuda-device-literal
    h = f"cuda:{i}"                                  # cuda-device-literal
    k = torch.device("cuda" if t.is_cuda else "cpu")  # cuda-device-literal, is-cuda-attribute
    m = t.device == torch.device("cuda")             # cuda-device-comparison only
    n = str(t.device) == "cuda:0"                    # cuda-device-comparison only
    o = {"cpu": 1, "cuda": 2}                        # cuda-dict-key
    p = {"cuda": 1, torch._C._get_privateuse1_backend_name(): 2}  # no: names PrivateUse1
    q = f"device cuda:{i} failed", "cuda", {"cpu": 1}  # no: text, a bare "cuda", no cuda key
    r = torch.is_autocast_enabled()                  # autocast-without-device
    s = torch.get_autocast_gpu_dtype()               # autocast-without-device
    torch.set_autocast_enabled(True)                 # autocast-without-device
    torch._C.set_autocast_gpu_dtype(torch.half)      # autocast-without-device
    u = torch.is_autocast_enabled(t.device.type)     # no: asks about a device
    torch.set_autocast_enabled(t.device.type, True)  # no
    v = torch.is_autocast_cache_enabled(), torch.is_autocast_cpu_enabled()  # no
    w = f"cuda:{torch.cuda.current_device()}"        # cuda-device-literal + cuda-module-call
    return a, b, c, d, e, g, h, k, m, n, o, p, q, r, s, u, v, w
'''


def test_widened_categories(tmp_path):
    f = tmp_path / "torch" / "nn" / "widened.py"
    f.parent.mkdir(parents=True)
    f.write_text(WIDENED)
    (tmp_path / "torch" / "__init__.py").write_text("")
    sites = census.scan(tmp_path, [])
    assert by_category(sites, "torch/nn/widened.py") == {
        "cuda-module-import": 4,
        "default-device-cuda": 1,
        "is-cuda-attribute": 2,
        "cuda-device-literal": 7,
        "cuda-device-comparison": 2,
        "cuda-dict-key": 1,
        "autocast-without-device": 4,
        "cuda-module-call": 1,
    }
    literals = sorted(s["code"] for s in sites if s["category"] == "cuda-device-literal")
    assert "torch.device(f'cuda:{i}')" in literals and "'cuda:1'" in literals
    assert all(s["area"] == "eager runtime" for s in sites)


def test_exact_scope_entries(tmp_path):
    # path::=scope matches the class body only, path::scope its methods too
    f = tmp_path / "torch" / "distributed" / "c10d.py"
    f.parent.mkdir(parents=True)
    f.write_text(textwrap.dedent('''
        class Backend:
            caps = ["cpu", "cuda"]
            def register(self):
                return ["cpu", "cuda"]
    '''))
    (tmp_path / "torch" / "__init__.py").write_text("")
    allow = tmp_path / "allow.txt"
    allow.write_text("torch/distributed/c10d.py::=Backend  device-list-without-pu1\n")
    sites = census.scan(tmp_path, census.load_allowlist(allow))
    assert {s["scope"]: s["area"] for s in sites} == {
        "Backend": "allowlisted", "Backend.register": "distributed"}


# A site the series moves into an allowlisted helper, one it removes, one it adds.
MOVE_BEFORE = '''
import torch

def stage(t):
    torch.cuda.cudart().cudaHostRegister(t.data_ptr(), 4, 0)
    return t

def sync(t):
    torch.cuda.synchronize()
    return t
'''
MOVE_AFTER = '''
import torch

def _register_host_memory(t):
    if t.device.type == "cuda":
        torch.cuda.cudart().cudaHostRegister(t.data_ptr(), 4, 0)

def stage(t):
    _register_host_memory(t)
    return t

def sync(t):
    torch.accelerator.synchronize()
    return t.to("cuda:0")
'''
MOVE_ALLOW = """\
# cudaHostRegister exists only for CUDA
torch/distributed/pin.py::_register_host_memory   *
"""


def _write_tree(root: Path, source: str) -> None:
    f = root / "torch" / "distributed" / "pin.py"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(source)
    (root / "torch" / "__init__.py").write_text("")


def test_moved_into_an_allowlisted_helper(tmp_path):
    allow_file = tmp_path / "allow.txt"
    allow_file.write_text(MOVE_ALLOW)
    allow = census.load_allowlist(allow_file)
    _write_tree(tmp_path / "before", MOVE_BEFORE)
    _write_tree(tmp_path / "after", MOVE_AFTER)
    calls_b, calls_a = {}, {}
    before = census.scan(tmp_path / "before", allow, calls_b)
    after = census.scan(tmp_path / "after", allow, calls_a)
    moved = census.moved_sites(before, after, calls_b, calls_a)
    assert [(s["scope"], s["category"], h["scope"]) for s, h in moved] == [
        ("stage", "cudart-call", "_register_host_memory")]
    removed, moved_sites, added = census.series_flow(before, after, moved)
    assert [(s["scope"], s["category"]) for s in removed] == [("sync", "cuda-module-call")]
    assert [s["scope"] for s in moved_sites] == ["stage"]
    assert [(s["scope"], s["category"]) for s in added] == [("sync", "cuda-device-literal")]
    # a new call into an allowlisted helper of another category is not a move
    helper_cats = {h["category"] for h in after if h["scope"] == "_register_host_memory"}
    assert helper_cats == {"cudart-call", "cuda-device-comparison"}
    assert "cuda-module-call" not in helper_cats


PATCH_HEADER = """\
From: torch-hal maintainers <maintainers@torch-hal.invalid>
Date: Fri, 4 Dec 2026 07:57:41 +0000
Subject: [PATCH] distributed: register host memory through a helper

Upstream-Status: Pending
---
"""


def _series(tmp_path: Path) -> Path:
    """A one-patch series turning MOVE_BEFORE into MOVE_AFTER, with its claims."""
    import difflib

    diff = difflib.unified_diff(MOVE_BEFORE.splitlines(keepends=True),
                                MOVE_AFTER.splitlines(keepends=True),
                                "a/torch/distributed/pin.py", "b/torch/distributed/pin.py")
    sdir = tmp_path / "series"
    sdir.mkdir()
    (sdir / "0001-move.patch").write_text(
        PATCH_HEADER + "diff --git a/torch/distributed/pin.py b/torch/distributed/pin.py\n"
        + "".join(diff))
    (sdir / "series").write_text("0001-move.patch\n")
    (sdir / "census_claims.txt").write_text(
        "0001  torch/distributed/pin.py::stage  cudart-call\n"
        "0001  torch/distributed/pin.py::sync   cuda-module-call\n")
    return sdir


def test_cli_series_reports_moved_removed_and_added(tmp_path):
    tree = tmp_path / "tree"
    _write_tree(tree, MOVE_BEFORE)
    sdir = _series(tmp_path)
    allow = tmp_path / "allow.txt"
    allow.write_text(MOVE_ALLOW)
    tracked = tmp_path / "tracked.txt"
    tracked.write_text("torch/distributed/pin.py::sync  cuda-device-literal  T1\n")
    md = tmp_path / "TRACKED.md"
    md.write_text("| # | site | why not a patch | what |\n|---|---|---|---|\n"
                  "| T1 | pin.py | a test item | nothing |\n")
    r = subprocess.run([sys.executable, str(REPO / "upstream_tracking" / "census.py"), str(tree),
                        "--series", "--series-dir", str(sdir), "--allowlist", str(allow),
                        "--tracked", str(tracked), "--tracked-md", str(md)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "1 removed, 1 moved into allowlisted helpers, 1 added" in out
    assert "sites the series moves into allowlisted helpers (counted as moved, not removed): 1" in out
    assert "-> torch/distributed/pin.py::_register_host_memory (cudaHostRegister exists only for CUDA)" in out
    assert "ok, 1 of them moved into an allowlisted helper" in out
    assert "sites the series adds outside allowlisted code: 1" in out
    assert "distributed                      2 -> 1" in out
    # the headline names every area, the compile stack and the test utilities included
    for area in ("eager runtime", "distributed", "compile stack", "test utilities",
                 "benchmarks and tools"):
        assert f"\n  {area} " in out
