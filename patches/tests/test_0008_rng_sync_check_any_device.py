"""0008: the distributed RNG desync check accepts the generator of any device."""

import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.collective_utils import _check_rng_sync


def _worker(rank, world_size, store_path, out_dir, dev):
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, store=store)
    try:
        gen = torch.Generator(device=dev)
        gen.manual_seed(1234)
        in_sync = _check_rng_sync(gen, dist.group.WORLD)
        gen.manual_seed(1234 + rank)  # every rank now differs
        desync = _check_rng_sync(gen, dist.group.WORLD)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump({"in_sync": in_sync, "desync": desync}, f)


def test_rng_sync_check_on_accelerator_generators(tmp_path, dev):
    world_size = 2
    mp.spawn(_worker, args=(world_size, str(tmp_path / "store"), str(tmp_path), dev),
             nprocs=world_size, join=True)
    for rank in range(world_size):
        r = json.loads((tmp_path / f"{rank}.json").read_text())
        assert r["in_sync"] is None
        assert r["desync"] is not None and "desync" in r["desync"]
