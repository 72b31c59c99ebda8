#!/usr/bin/env python3
"""A training script written the way CUDA users write it; the device string is the only switch.

    torchrun --nproc-per-node auto train_cuda_style.py --device cuda
    torchrun --nproc-per-node auto train_cuda_style.py --device hal      # torch_hal, cpu backend

Nothing below names CUDA: the script relies on PyTorch's defaults (``torch.amp.GradScaler()``,
``torch.random.fork_rng()``, ``save_on_cpu(pin_memory=True)``, ``new_subgroups()``,
``--nproc-per-node auto``) exactly where a CUDA script does, which is where CUDA hardcoding in
PyTorch would show. Every feature is checked on its own and reported as ``pass``,
``FAIL: <what went wrong>`` or ``error: <exception>``, so one broken feature does not hide the
others. With ``--json-dir`` each rank writes its results to ``train_cuda_style.rank<N>.json``.

Distributed features use the c10d backend PyTorch registers as the device's default
(``dist.get_default_backend_for_device``: nccl for cuda). When the device has none, that is
reported, the process group falls back to gloo (CPU), and the features that need device
collectives (DDP) report the error they hit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.utils.checkpoint as activation_checkpoint


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.25), nn.Linear(64, 64))
        self.head = nn.Linear(64, 8)

    def forward(self, x, checkpoint=None):
        if checkpoint is None:
            h = self.body(x)
        else:
            h = activation_checkpoint.checkpoint(self.body, x, use_reentrant=checkpoint)
        return self.head(h)


class Ctx:
    def __init__(self, args):
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ
        self.device = torch.device(args.device, self.local_rank)
        self.device_backend = None  # name of the device's c10d backend once the group is up
        if args.work_dir:
            self.tmp = Path(args.work_dir)
        elif self.under_torchrun:  # one directory shared by the ranks of this run
            self.tmp = Path(tempfile.gettempdir()) / f"train-cuda-style-{os.environ['TORCHELASTIC_RUN_ID']}"
        else:
            self.tmp = Path(tempfile.mkdtemp(prefix="train-cuda-style-"))
        self.tmp.mkdir(parents=True, exist_ok=True)


# ----------------------------------------------------------------------------------------------
# Features. Each returns None (pass) or a failure description; exceptions become "error: ...".

FEATURES = []


def feature(name, needs_device_collectives=False):
    def deco(fn):
        FEATURES.append((name, fn, needs_device_collectives))
        return fn

    return deco


@feature("torchrun --nproc-per-node auto")
def torchrun_auto(ctx):
    if not ctx.under_torchrun:
        return "SKIP: not launched with torchrun"
    expected = torch.accelerator.device_count()
    got = int(os.environ["LOCAL_WORLD_SIZE"])
    if got != expected:
        return f"{got} local workers for {expected} {ctx.args.device} devices"
    return None


@feature("process group (device's default backend)", needs_device_collectives=True)
def process_group(ctx):
    init = {}
    if not ctx.under_torchrun:
        init = dict(init_method=f"file://{ctx.tmp / 'pg'}", rank=0, world_size=1)
    try:
        # 'cpu:gloo,cuda:nccl' on CUDA: CPU collectives for async checkpointing, the device's
        # own backend for device tensors.
        backend = dist.get_default_backend_for_device(ctx.device)
    except Exception as e:  # no c10d backend registered for this device
        dist.init_process_group("gloo", **init)
        return f"error: {type(e).__name__}: {e} (fell back to gloo on CPU)"
    dist.init_process_group(f"cpu:gloo,{ctx.device.type}:{backend}", **init)
    ctx.device_backend = backend
    return None


@feature("autocast")
def autocast(ctx):
    model = Model().to(ctx.device)
    with torch.autocast(device_type=ctx.device.type):
        y = model.body[0](torch.randn(4, 32, device=ctx.device))
    if y.dtype not in (torch.float16, torch.bfloat16):
        return f"linear under autocast returned {y.dtype}"
    return None


@feature("torch.amp.GradScaler() (defaults)")
def grad_scaler(ctx):
    torch.manual_seed(0)
    model = Model().to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = torch.amp.GradScaler()
    if not scaler.is_enabled():
        msgs = "; ".join(str(w.message) for w in caught)
        return f"the scaler disabled itself: {msgs or 'no warning'}"
    for _ in range(3):
        x = torch.randn(16, 32, device=ctx.device)
        with torch.autocast(device_type=ctx.device.type, dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaled = scaler.scale(loss)
        if not torch.allclose(scaled, loss * scaler.get_scale()):
            return "the loss was not scaled"
        opt.zero_grad()
        scaled.backward()
        scaler.step(opt)
        scaler.update()
    if not all(torch.isfinite(p).all() for p in model.parameters()):
        return "non-finite parameters after scaled steps"
    return None


@feature("torch.random.fork_rng() (defaults)")
def fork_rng(ctx):
    torch.manual_seed(1)
    with torch.random.fork_rng():
        torch.rand(100, device=ctx.device)  # consumed inside the fork only
    after = torch.rand(4, device=ctx.device)
    torch.manual_seed(1)
    expected = torch.rand(4, device=ctx.device)
    if not torch.equal(after.cpu(), expected.cpu()):
        return "the device generator state was not restored on exit"
    return None


@feature("DataLoader(pin_memory=True) + non_blocking copies")
def pin_memory(ctx):
    data = torch.randn(64, 32)
    target = torch.randint(0, 8, (64,))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(data, target), batch_size=16, pin_memory=True
    )
    seen = []
    for x, y in loader:
        if not (x.is_pinned() and y.is_pinned()):
            return "batches were not pinned"
        x = x.to(ctx.device, non_blocking=True)
        y = y.to(ctx.device, non_blocking=True)
        seen.append(x)
    torch.accelerator.synchronize()
    if not torch.equal(torch.cat(seen).cpu(), data):
        return "non_blocking copies returned wrong data"
    return None


def _checkpoint_matches(ctx, reentrant):
    model = Model().to(ctx.device)
    x = torch.randn(16, 32, device=ctx.device, requires_grad=True)
    torch.manual_seed(7)
    model(x).sum().backward()
    ref = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    torch.manual_seed(7)
    model(x, checkpoint=reentrant).sum().backward()
    got = [p.grad for p in model.parameters()] + [x.grad]
    if not all(torch.allclose(a.cpu(), b.cpu(), atol=1e-6) for a, b in zip(got, ref)):
        return "gradients through the checkpointed dropout differ from the plain run"
    return None


@feature("activation checkpointing, reentrant, with dropout")
def checkpoint_reentrant(ctx):
    return _checkpoint_matches(ctx, True)


@feature("activation checkpointing, non-reentrant, with dropout")
def checkpoint_non_reentrant(ctx):
    return _checkpoint_matches(ctx, False)


@feature("activation offload: save_on_cpu(pin_memory=True)")
def activation_offload(ctx):
    model = Model().to(ctx.device).eval()  # no dropout: compare with the plain run
    x = torch.randn(16, 32, device=ctx.device)
    model(x).sum().backward()
    ref = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True)
    _, packed = hooks.pack_hook(torch.randn(8, device=ctx.device))
    with hooks:
        y = model(x)
    y.sum().backward()
    if not all(torch.allclose(p.grad.cpu(), r.cpu()) for p, r in zip(model.parameters(), ref)):
        return "gradients differ with offloaded activations"
    if not packed.is_pinned():
        return "offloaded activations are not in pinned memory"
    return None


@feature("DistributedDataParallel", needs_device_collectives=True)
def ddp(ctx):
    torch.manual_seed(0)
    model = Model().to(ctx.device)
    ddp_model = nn.parallel.DistributedDataParallel(model, device_ids=[ctx.local_rank])
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    torch.manual_seed(100 + ctx.rank)
    for _ in range(2):
        opt.zero_grad()
        ddp_model(torch.randn(8, 32, device=ctx.device)).sum().backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    if not torch.allclose(flat.cpu(), ref.cpu()):
        return "parameters diverged across ranks"
    return None


@feature("dist.new_subgroups() (defaults)")
def new_subgroups(ctx):
    cur, _ = dist.new_subgroups()
    on = ctx.device if ctx.device_backend else torch.device("cpu")
    t = torch.ones(1, device=on)
    dist.all_reduce(t, group=cur)
    if int(t.item()) != cur.size():
        return f"all_reduce over the subgroup gave {t.item()}, expected {cur.size()}"
    return None


def _state(model, opt):
    return {"model": model.state_dict(), "optim": opt.state_dict()}


def _trained(ctx):
    torch.manual_seed(3)
    model = Model().to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 32, device=ctx.device)).sum().backward()
    opt.step()
    return model, opt


def _compare_after_load(ctx, model, path):
    fresh = Model().to(ctx.device)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    fresh(torch.randn(4, 32, device=ctx.device)).sum().backward()
    fresh_opt.step()
    state = _state(fresh, fresh_opt)
    dcp.load(state, checkpoint_id=path)
    fresh.load_state_dict(state["model"])
    for (k, a), b in zip(model.state_dict().items(), fresh.state_dict().values()):
        if b.device.type != ctx.device.type or not torch.equal(a.cpu(), b.cpu()):
            return f"{k} differs after load"
    return None


@feature("torch.distributed.checkpoint save/load")
def dcp_save_load(ctx):
    model, opt = _trained(ctx)
    path = ctx.tmp / "dcp"
    dcp.save(_state(model, opt), checkpoint_id=path)
    return _compare_after_load(ctx, model, path)


@feature("torch.distributed.checkpoint async_save, pinned staging")
def dcp_async_save(ctx):
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    model, opt = _trained(ctx)
    path = ctx.tmp / "dcp-async"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stager = DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=False))
        response = dcp.async_save(_state(model, opt), checkpoint_id=path, async_stager=stager)
        (response.upload_completion if hasattr(response, "upload_completion") else response).result()
    stager.close()
    ignored = [str(w.message) for w in caught if "pin_memory" in str(w.message)]
    if ignored:
        return f"pinned staging was turned off: {ignored[0]}"
    return _compare_after_load(ctx, model, path)


# ----------------------------------------------------------------------------------------------


def run_features(ctx):
    results = {}
    for name, fn, needs_device_collectives in FEATURES:
        entry = {}
        if fn in (ddp, new_subgroups) and not dist.is_initialized():
            entry["status"] = "error: no process group"
        else:
            try:
                out = fn(ctx)
                if out is None:
                    entry["status"] = "pass"
                elif out.startswith("SKIP"):
                    entry["status"] = "skip" + out[4:]
                elif out.startswith("error:"):
                    entry["status"] = out
                else:
                    entry["status"] = f"FAIL: {out}"
            except Exception as e:  # one feature must not stop the others
                entry["status"] = f"error: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                entry["traceback"] = traceback.format_exc(limit=6)
        if needs_device_collectives and ctx.device_backend is None and entry["status"] != "pass":
            entry["blocked_by"] = f"no c10d backend registered for {ctx.device.type}"
        results[name] = entry
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.barrier()
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="the only switch: cuda, hal, neuron, ...")
    ap.add_argument("--json-dir", help="write train_cuda_style.rank<N>.json here")
    ap.add_argument("--work-dir", help="checkpoint directory (default: a temp dir)")
    args = ap.parse_args(argv)
    ctx = Ctx(args)
    # the device-generic spelling of torch.cuda.set_device(local_rank)
    torch.accelerator.set_device_index(ctx.local_rank)
    results = run_features(ctx)
    if args.json_dir:
        out = Path(args.json_dir)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"torch": torch.__version__, "torch_file": torch.__file__, "device": args.device,
                "rank": ctx.rank, "world_size": ctx.world_size}
        (out / f"train_cuda_style.rank{ctx.rank}.json").write_text(
            json.dumps({"meta": meta, "features": results}, indent=1))
    if ctx.rank == 0:
        width = max(len(n) for n in results)
        for name, entry in results.items():
            print(f"{name:<{width}}  {entry['status']}")
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
