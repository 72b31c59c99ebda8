"""Tests of upstream_tracking/census.py on a small synthetic torch tree."""

import re
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
    assert re.search(r"\n  distributed +2 -> 1 +\(-1: 1 removed, 1 moved, 1 added\)", out)
    # the headline names every area, the compile stack and the test utilities included
    for area in ("eager runtime", "distributed", "compile stack", "test utilities",
                 "benchmarks and tools"):
        assert f"\n  {area} " in out
    # the training paths come first: torch/distributed/ is one of them
    assert out.index("headline: CUDA hardcoding on the paths") < out.index("every area")
    assert re.search(r"\n  training paths +2 -> 1 ", out)


# The categories of "Follow upstream" item 6, each with what it must not count. The file sits
# in torch/nn/ (an eager file: no cpu-only-codegen there).
ITEM6 = '''
import os
from typing import cast

import torch
import torch.distributed as dist
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity


def f(t, s: torch.cuda.Stream, x, name, backend) -> torch.cuda.Event:  # no: annotations
    """CUDA_VISIBLE_DEVICES and t.to("cuda") in a docstring do not count"""
    # os.environ["CUDA_VISIBLE_DEVICES"] in a comment does not count
    a = t.to("cuda")                                    # cuda-string-argument
    b = torch.autocast("cuda", dtype=torch.bfloat16)    # cuda-string-argument
    c = torch.empty(1, device="cuda")                   # cuda-string-argument
    d = t.to("cuda" if x else "cpu")                    # cuda-string-argument
    e = getattr(torch.version, "cuda", None)            # no: an attribute name
    g = name.replace("cuda", "device")                  # no: text
    h = torch.device("cuda")                            # cuda-device-literal only
    k = print("cuda is here")                           # no: not a device type
    m = isinstance(s, torch.cuda.Stream)                # cuda-module-reference
    n = torch.cuda.current_device                       # cuda-module-reference
    o = torch.cuda                                      # cuda-module-reference
    p = getattr(torch, "cuda")                          # cuda-module-reference
    torch.cuda.synchronize()                            # cuda-module-call only
    q = cast(torch.cuda.Stream, s)                      # no: a type for the checker
    r = getattr(torch, name, torch.cuda)                # cuda-module-fallback only
    u = torch.cuda.get_device_properties(0).major       # cuda-module-call only
    v = torch._C._cuda_getDeviceCount()                 # cuda-binding-call
    w = torch._C._get_accelerator()                     # no
    y = backend == "nccl"                               # nccl-backend-comparison
    z = dist.get_backend() == dist.Backend.NCCL         # nccl-backend-comparison
    aa = backend in (dist.Backend.NCCL, dist.Backend.XCCL)  # nccl-backend-comparison
    bb = {"cuda": dist.Backend.NCCL}                    # cuda-dict-key; the NCCL value: no
    cc = backend == "gloo"                              # no
    dd = os.environ["CUDA_VISIBLE_DEVICES"]             # cuda-visible-devices
    ee = DeviceType.CUDA                                # cuda-enum-member
    ff = ProfilerActivity.CUDA in {ProfilerActivity.CPU}  # cuda-enum-member
    gg = [DeviceType.CUDA, DeviceType.PrivateUse1]      # no: PrivateUse1 is served too
    hh = torch._C.DispatchKey.CUDA                      # no: CUDA's own kernel
    ii = t.device.type == "cpu"                         # no: not Inductor
    return locals()
'''

# Inductor: is_gpu() and the CPU tests deciding code generation, with the device-generic
# question and its fast path, which do not count
INDUCTOR = '''
from .codegen.cpp import CppScheduling
from .utils import get_current_backend, GPU_TYPES, is_gpu


def lower(device, node, x, t):
    a = is_gpu(device.type)                             # gpu-types-check
    b = device.type in GPU_TYPES                        # gpu-types-check
    c = device.type == "cpu"                            # cpu-only-codegen
    d = node.is_cpu()                                   # cpu-only-codegen
    e = is_cpu(x)                                       # cpu-only-codegen
    g = t.is_cpu                                        # cpu-only-codegen
    h = device.type == "cpu" or get_current_backend(device.type) == "cpp"  # no: generic
    return a, b, c, d, e, g, h


def generates_cpp(device):
    # no: the function answers "does this device generate C++ kernels" for every device
    return device.type == "cpu" or get_current_backend(device.type) == "cpp"


class Scheduler:
    def _generates_cpp(self, node):
        if node.is_cpu():                               # no: the fast path of the question
            return True
        return isinstance(self.get_backend(node.get_device()), CppScheduling)
'''


def _tree(root: Path, files: dict, version: str | None = None) -> Path:
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    (root / "torch" / "__init__.py").write_text("")
    if version:
        (root / "torch" / "version.py").write_text(f"__version__ = '{version}'\n")
    return root


def test_item6_categories(tmp_path):
    _tree(tmp_path, {"torch/nn/item6.py": ITEM6, "torch/_inductor/item6.py": INDUCTOR})
    sites = census.scan(tmp_path, [])
    assert by_category(sites, "torch/nn/item6.py") == {
        "cuda-string-argument": 4,
        "cuda-module-reference": 4,
        "cuda-module-call": 2,
        "cuda-module-fallback": 1,
        "cuda-device-literal": 1,
        "cuda-binding-call": 1,
        "nccl-backend-comparison": 3,
        "cuda-dict-key": 1,
        "cuda-visible-devices": 1,
        "cuda-enum-member": 2,
    }
    refs = sorted(s["code"] for s in sites if s["category"] == "cuda-module-reference")
    assert refs == ["getattr(torch, 'cuda')", "torch.cuda", "torch.cuda.Stream",
                    "torch.cuda.current_device"]
    assert by_category(sites, "torch/_inductor/item6.py") == {
        "gpu-types-check": 2,
        "cpu-only-codegen": 4,
    }
    assert {s["area"] for s in sites if s["path"] == "torch/_inductor/item6.py"} == {
        "compile stack"}


def test_autocast_without_device_follows_the_release(tmp_path):
    # from 2.14 the no-argument is_autocast_enabled() answers for the current accelerator
    source = ("import torch\n"
              "a = torch.is_autocast_enabled()\n"
              "b = torch.get_autocast_gpu_dtype()\n")
    for version, expected in (("2.13.0", 2), ("2.14.1+cu130", 1), (None, 2)):
        root = _tree(tmp_path / str(version), {"torch/nn/amp.py": source}, version)
        sites = census.scan(root, [])
        assert len([s for s in sites if s["category"] == "autocast-without-device"]) == expected


RULES = '''
class CUDAHeuristic:
    def configs(self):
        return torch.cuda.get_device_capability()


class Generic:
    def configs(self):
        return torch.cuda.get_device_capability()


def helper(backend_str, backend_config):
    if backend_str == Backend.NCCL:
        pass
    if Backend.NCCL in backend_config.values():
        pass
'''


def test_rule_wildcards_and_code_filter(tmp_path):
    # path::CUDA* matches scopes by fnmatch; ~TEXT keeps the sites whose code contains TEXT
    _tree(tmp_path, {"torch/distributed/c10d.py": RULES})
    allow = tmp_path / "allow.txt"
    allow.write_text("torch/distributed/c10d.py::CUDA*  *\n"
                     "torch/distributed/c10d.py::helper  nccl-backend-comparison  ~backend_str\n")
    sites = census.scan(tmp_path, census.load_allowlist(allow))
    areas = {(s["scope"], s["code"].split()[0]): s["area"] for s in sites}
    assert areas == {
        ("CUDAHeuristic.configs", "torch.cuda.get_device_capability()"): "allowlisted",
        ("Generic.configs", "torch.cuda.get_device_capability()"): "distributed",
        ("helper", "backend_str"): "allowlisted",
        ("helper", "Backend.NCCL"): "distributed",
    }
    # the same filter on a tracked entry, before its item
    tracked = tmp_path / "tracked.txt"
    tracked.write_text("torch/distributed/c10d.py::helper  *  ~backend_config  T1\n")
    (rule,) = census.load_tracked(tracked)
    assert (rule.item, rule.code, rule.category) == ("T1", "backend_config", "*")


def test_training_paths():
    def on(path, area):
        return census.on_training_path({"path": path, "area": area})

    assert on("torch/nn/parallel/distributed.py", "eager runtime")  # DDP
    assert on("torch/amp/grad_scaler.py", "eager runtime")
    assert on("torch/distributed/fsdp/_common_utils.py", "distributed")
    assert on("torch/_inductor/scheduler.py", "compile stack")
    assert not on("torch/nn/parallel/data_parallel.py", "eager runtime")  # not DDP
    assert not on("torch/distributed/rpc/options.py", "distributed")
    assert not on("torch/onnx/utils.py", "compile stack")
    assert not on("torch/testing/_internal/common_utils.py", "test utilities")
    assert not on("torch/nn/modules/rnn.py", "allowlisted")


SOURCE_EXTRA = "import torch\n\n\ndef sync():\n    torch.cuda.synchronize()\n"


def _compare_trees(tmp_path: Path, release_series: bool):
    """2.13.0 with a site that upstream removes (extra.py), 2.14.1 without it; the MOVE series
    for 2.13.0 and, with release_series, the same patch as 2.14.1's series (series/2.14.1/series
    naming ../0001-move.patch)."""
    old = _tree(tmp_path / "old", {"torch/distributed/pin.py": MOVE_BEFORE,
                                   "torch/distributed/extra.py": SOURCE_EXTRA}, "2.13.0")
    new = _tree(tmp_path / "new", {"torch/distributed/pin.py": MOVE_BEFORE}, "2.14.1+cu130")
    sdir = _series(tmp_path)
    if release_series:
        (sdir / "2.14.1").mkdir()
        (sdir / "2.14.1" / "series").write_text("# base-version: 2.14.1\n../0001-move.patch\n")
    allow = tmp_path / "allow.txt"
    allow.write_text(MOVE_ALLOW)
    return subprocess.run(
        [sys.executable, str(REPO / "upstream_tracking" / "census.py"), "--compare", str(old),
         str(new), "--series-dir", str(sdir), "--allowlist", str(allow)],
        capture_output=True, text=True)


def test_compare_two_releases(tmp_path):
    r = _compare_trees(tmp_path, release_series=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert re.search(r"\n +2\.13\.0 +2\.14\.1 +upstream +series on 2\.13\.0 +series on 2\.14\.1 "
                     r"+2\.14\.1 \+ series\n", out), out
    # per area and category: 2.13.0, 2.14.1, upstream's change, the change of each release's
    # series, 2.14.1 with its series
    assert re.search(r"\n  distributed +3 +2 +-1 +-1 +-1 +1\n", out), out
    assert re.search(r"\n    cuda-module-call +2 +1 +-1 +-1 +-1 +0\n", out), out
    assert re.search(r"\n  training paths +3 +2 +-1 +-1 +-1 +1\n", out), out
    assert out.index("headline: the training paths") < out.index("every area")
    assert "(1 patches)" in out
    assert "2.13.0 training paths: 3 -> 2 (-1: 1 removed, 1 moved, 1 added)" in out
    assert "2.14.1 training paths: 2 -> 1 (-1: 1 removed, 1 moved, 1 added)" in out


def test_compare_without_a_release_series(tmp_path):
    r = _compare_trees(tmp_path, release_series=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no series for 2.14.1" in r.stdout
    assert re.search(r"\n  distributed +3 +2 +-1 +-1 +n/a +n/a\n", r.stdout), r.stdout


def test_series_of_a_release_skips_claims_of_patches_it_does_not_carry(tmp_path):
    tree = _tree(tmp_path / "tree", {"torch/distributed/pin.py": MOVE_BEFORE}, "2.14.1")
    sdir = _series(tmp_path)
    (sdir / "2.14.1").mkdir()
    (sdir / "2.14.1" / "series").write_text("# base-version: 2.14.1\n../0001-move.patch\n")
    claims = tmp_path / "claims.txt"
    claims.write_text((sdir / "census_claims.txt").read_text() + "0002  -  # upstream has it\n")
    allow = tmp_path / "allow.txt"
    allow.write_text(MOVE_ALLOW)
    tracked = tmp_path / "tracked.txt"
    tracked.write_text("torch/distributed/pin.py::sync  cuda-device-literal  T1\n")
    md = tmp_path / "TRACKED.md"
    md.write_text("| # | site | why not a patch | what |\n|---|---|---|---|\n"
                  "| T1 | pin.py | a test item | nothing |\n")
    args = [sys.executable, str(REPO / "upstream_tracking" / "census.py"), str(tree), "--series",
            "--allowlist", str(allow), "--tracked", str(tracked), "--tracked-md", str(md),
            "--claims", str(claims)]
    r = subprocess.run(args + ["--series-dir", str(sdir / "2.14.1")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "not carried by this series (claims skipped): 0002" in r.stdout
    # the main series must carry every patch it claims for
    r = subprocess.run(args + ["--series-dir", str(sdir)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "census_claims.txt: 0002 is not a patch of the series" in r.stdout
