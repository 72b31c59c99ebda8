"""0014: a ShardedTensor on a rank that holds none of its shards reports (and moves to) the
current device of the accelerator, not torch.cuda's.

FSDP's SHARDED_STATE_DICT is made of ShardedTensors. With two ranks, a parameter of one row
is held by rank 0 only, and saving the state dict with torch.distributed.checkpoint asks rank 1
for the device of its empty ShardedTensor (pytorch/pytorch#186938).
"""

import json
import os
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp


def _worker(rank, world_size, store_path, out_dir, dev):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    warnings.simplefilter("ignore")
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import StateDictType

    torch.accelerator.set_device_index(rank)
    store = dist.FileStore(store_path, world_size)
    backend = dist.get_default_backend_for_device(dev)
    dist.init_process_group(f"cpu:gloo,{dev}:{backend}", rank=rank, world_size=world_size,
                            store=store)
    result = {}
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)).to(dev)
        fsdp = FSDP(model, device_id=torch.device(dev, rank), use_orig_params=True)
        fsdp(torch.randn(3, 4, device=dev)).sum().backward()
        with FSDP.state_dict_type(fsdp, StateDictType.SHARDED_STATE_DICT):
            state = {"model": fsdp.state_dict()}
            empty = [k for k, v in state["model"].items() if not v.local_shards()]
            result["empty"] = empty
            result["devices"] = {k: str(state["model"][k].device) for k in empty}
            result["to_self"] = {k: state["model"][k].to(dev) is state["model"][k]
                                 for k in empty}
            ckpt = os.path.join(out_dir, "ckpt")
            dcp.save(state, checkpoint_id=ckpt)
            loaded = {"model": fsdp.state_dict()}
            dcp.load(loaded, checkpoint_id=ckpt)
            fsdp.load_state_dict(loaded["model"])
        result["saved_and_loaded"] = True
    except Exception as e:  # reported to the test
        result["error"] = f"{type(e).__name__}: {e}"[:2000]
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(result, f)


def test_fsdp_sharded_state_dict_with_an_empty_rank(tmp_path, dev):
    world_size = 2
    assert torch.accelerator.device_count() >= world_size
    mp.spawn(_worker, args=(world_size, str(tmp_path / "store"), str(tmp_path), dev),
             nprocs=world_size, join=True)
    results = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(world_size)]
    errors = {rank: r["error"] for rank, r in enumerate(results) if "error" in r}
    assert not errors, errors
    assert all(r["saved_and_loaded"] for r in results)
    # rank 1 holds no shard of the one-row layer
    assert sorted(results[1]["empty"]) == ["1.bias", "1.weight"]
    assert set(results[1]["devices"].values()) == {f"{dev}:1"}
    assert all(results[1]["to_self"].values())
