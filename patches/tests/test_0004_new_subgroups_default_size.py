"""0004: dist.new_subgroups() without group_size makes one subgroup per machine's devices, and
what it tells the user about that default (its documentation, its error without an accelerator)
names the accelerator, not CUDA. PyTorch 2.14 counts the accelerator's devices already; on it
the patch keeps only the documentation and the error.
"""

import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world_size, store_path, out_dir):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, store=store)
    try:
        cur, groups = dist.new_subgroups()
        result = {
            "size": cur.size(),
            "ranks": dist.get_process_group_ranks(cur),
            "groups": len(groups),
            "devices": torch.accelerator.device_count(),
        }
        t = torch.ones(1)
        dist.all_reduce(t, group=cur)
        result["sum"] = t.item()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(result, f)


def test_default_group_size_is_the_accelerator_device_count(tmp_path):
    n = torch.accelerator.device_count()
    assert n >= 1
    world_size = n  # one machine with n devices and one rank per device
    mp.spawn(_worker, args=(world_size, str(tmp_path / "store"), str(tmp_path)),
             nprocs=world_size, join=True)
    for rank in range(world_size):
        r = json.loads((tmp_path / f"{rank}.json").read_text())
        assert r == {"size": n, "ranks": list(range(n)), "groups": 1, "devices": n, "sum": n}


def test_the_default_is_documented_and_reported_as_the_accelerator_s(tmp_path):
    doc = " ".join(dist.new_subgroups.__doc__.split())
    start = doc.index("If no ``group_size`` is passed in")
    warning = doc[start:doc.index("``group_size`` correctly.", start)]
    assert "CUDA" not in warning, warning
    # Without an accelerator (torch_hal not loaded) the default cannot be taken: the error says why.
    code = (
        "import torch, torch.distributed as dist\n"
        "assert not torch.accelerator.is_available()\n"
        f"dist.init_process_group('gloo', store=dist.FileStore({str(tmp_path / 'store')!r}, 1), "
        "rank=0, world_size=1)\n"
        "try:\n"
        "    dist.new_subgroups()\n"
        "except ValueError as e:\n"
        "    print(e)\n"
        "dist.destroy_process_group()\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    message = proc.stdout.strip()
    assert "group_size" in message and "CUDA" not in message, message
