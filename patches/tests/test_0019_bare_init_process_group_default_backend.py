"""0019: after a bare ``dist.init_process_group()`` (as torchrun scripts write it) the group's
default backend is the one it holds for the accelerator, so DDP works on a PrivateUse1 device as
on CUDA (on 2.13.0 a backport of pytorch/pytorch#189193, which 2.14 has).

Unpatched, the group's default backend type is GLOO whenever NCCL is not in the map, while the
group holds only the accelerator's backend: ``DistributedDataParallel(model)`` fails with "Could
not find backend type 1 for Process Group".
"""

import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, dev, out_dir):
    # What torchrun sets, and what its scripts do with it.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(dev, local_rank % torch.accelerator.device_count())
    torch.accelerator.set_device_index(device.index)
    dist.init_process_group()
    result = {"backend": str(dist.get_backend()), "config": dist.get_backend_config()}
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4).to(device))
        torch.manual_seed(1 + rank)  # each rank its own batch
        model(torch.randn(16, 8, device=device)).square().sum().backward()
        result["grad"] = model.module.weight.grad.cpu().flatten().tolist()
        result["error"] = None
    except Exception as exc:  # reported to the parent, which asserts on it
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(result, f)


def test_ddp_after_bare_init_process_group(tmp_path, dev):
    import torch_hal.distributed

    world_size = 2
    mp.spawn(_worker, args=(world_size, _free_port(), dev, str(tmp_path)), nprocs=world_size,
             join=True)
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(world_size)]
    for r in results:
        assert r["error"] is None, r["error"]
        # The group holds the device's backend only; its name stays "undefined", as on CUDA.
        assert r["config"] == f"{dev}:{torch_hal.distributed.BACKEND_NAME}"
        assert r["backend"] == "undefined"
    assert results[0]["grad"] == results[1]["grad"]  # DDP averaged the gradients


def test_cpu_only_bare_init_keeps_gloo(tmp_path):
    # No accelerator (torch_hal not loaded): the bare call is what it was, undefined -> gloo.
    import subprocess
    import sys

    code = (
        "import os, torch, torch.distributed as dist\n"
        "assert not torch.accelerator.is_available()\n"
        f"dist.init_process_group(store=dist.FileStore({str(tmp_path / 'store')!r}, 1), "
        "rank=0, world_size=1)\n"
        "t = torch.ones(2); dist.all_reduce(t)\n"
        "print(dist.get_backend(), dist.get_backend_config())\n"
        "dist.destroy_process_group()\n")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["undefined", "cpu:gloo"], proc.stdout
