"""0004: dist.new_subgroups() without group_size makes one subgroup per machine's devices."""

import json
import os

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
