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
