"""0003: torchrun --nproc-per-node=gpu starts one process per device of the accelerator."""

import os
import subprocess
import sys

import torch
from torch.distributed.run import determine_local_world_size


def test_gpu_counts_accelerator_devices():
    assert torch.accelerator.is_available()
    assert determine_local_world_size("gpu") == torch.accelerator.device_count()


def test_torchrun_gpu_launches_one_worker_per_device(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(
        "import os\n"
        "print('worker', os.environ['LOCAL_RANK'], os.environ['LOCAL_WORLD_SIZE'], flush=True)\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node=gpu", "--tee=3", str(script)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    n = torch.accelerator.device_count()
    lines = [l for l in r.stdout.splitlines() if "worker " in l]
    assert len(lines) == n, r.stdout
    assert all(l.rstrip().endswith(f" {n}") for l in lines)
