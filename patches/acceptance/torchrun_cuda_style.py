#!/usr/bin/env python3
"""A torchrun script written the way CUDA scripts are; the device string is the only switch.

    torchrun --nproc-per-node 2 torchrun_cuda_style.py --device cuda
    torchrun --nproc-per-node 2 torchrun_cuda_style.py --device hal      # torch_hal, cpu backend
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 \\
    torchrun --nproc-per-node 2 torchrun_cuda_style.py --device cpu --record REF   # the reference
    torchrun --nproc-per-node 2 torchrun_cuda_style.py --device hal --compare REF

What a CUDA script does under torchrun, each a feature of its own. The idioms::

    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.accelerator.set_device_index(local_rank)      # torch.cuda.set_device(local_rank)
    dist.init_process_group()                           # no backend: the accelerator's (nccl)
    dist.get_backend()                                  # "undefined", as on CUDA
    model = DDP(model.to(device))                       # no device_ids
    torch.save(model.state_dict(), path)                # rank 0
    torch.load(path, map_location={"cuda:0": f"cuda:{local_rank}"})

then the device mesh of the node, ``init_device_mesh(device, (2,))``, and on it:

* an MLP with ``ColwiseParallel`` / ``RowwiseParallel`` (``parallelize_module``), trained;
* a transformer block (causal attention and an MLP) with sequence parallelism: the embedding
  sharded row-wise with its output split along the sequence, ``SequenceParallel`` layer norms,
  ``PrepareModuleInput`` before attention and MLP, the output projection column-wise;
* FSDP2: ``fully_shard`` on every block and on the model, float32;
* FSDP2 with ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``;
* ``torch.distributed.checkpoint`` save and load of the FSDP2 model and optimizer
  (``get_state_dict`` / ``set_state_dict``), the resumed model trained one more step;

and last ``torch.compile(model)`` (no backend named: Inductor), trained beside the eager model.

The tensor-parallel and FSDP2 features record the loss of every step and the full parameters
after it; ``--compare`` checks them bit for bit against the same job run on the CPU with gloo
(``--record``, which runs only the features it records). No dropout in them: DTensor random
ops need a counter-based generator (upstream_tracking/TRACKED.md, T1).
"""

from __future__ import annotations

import copy
import os
import sys
import time
import warnings
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

VOCAB, DIM, HEADS, SEQ, BATCH, STEPS = 64, 32, 4, 16, 4, 3

features = harness.Features("torchrun_cuda_style")


# ---- the torchrun idioms ---------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def need(ctx, *what):
    for w in what:
        if getattr(ctx, w) is None:
            raise RuntimeError(f"no {w}: {ctx.missing.get(w, 'an earlier feature failed')}")


@features.add("device index from LOCAL_RANK, torch.accelerator.set_device_index")
def local_rank_index(ctx):
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(ctx.args.device, local_rank)
    torch.accelerator.set_device_index(local_rank)
    x = torch.ones(2, device=device)
    if x.device != device or torch.accelerator.current_device_index() != local_rank:
        return f"the tensor landed on {x.device}, current device {torch.accelerator.current_device_index()}"
    return None


@features.add("bare dist.init_process_group(), collectives on the device")
def bare_init(ctx):
    need(ctx, "device")
    dist.init_process_group()
    t = torch.full((4,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(t)
    world = dist.get_world_size()
    if t.cpu().tolist() != [world * (world + 1) / 2] * 4:
        return f"all_reduce on {ctx.device} gave {t.cpu().tolist()}"
    return None


@features.add("dist.get_backend() after the bare init_process_group(), as on CUDA")
def get_backend(ctx):
    # After a bare init_process_group() CUDA answers "undefined" (torch 2.13 and 2.14) and the
    # group holds NCCL for the device ("cuda:nccl"): the device's group holds its default backend.
    if not dist.is_initialized():
        raise RuntimeError("no process group (see the init_process_group feature)")
    backend = dist.get_backend()
    config = dist.get_backend_config()
    expected = f"{ctx.device.type}:{dist.get_default_backend_for_device(ctx.device)}"
    if backend != "undefined" or config != expected:
        return (f"dist.get_backend() is {backend!r} and get_backend_config() {config!r}, "
                f"as on CUDA 'undefined' and {expected!r}")
    return None


@features.add("DDP(model) after the bare init_process_group()")
def ddp_bare(ctx):
    need(ctx, "device")
    if not dist.is_initialized():
        raise RuntimeError("no process group (see the init_process_group feature)")
    torch.manual_seed(0)
    model = DDP(Net().to(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + ctx.rank)  # different data on every rank
    for _ in range(3):
        x = torch.randn(16, 32, generator=g).to(ctx.device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    if not torch.equal(flat.cpu(), ref.cpu()):
        return "parameters diverged across ranks"
    return None


def trained(ctx):
    torch.manual_seed(0)
    model = Net().to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(16, 32, device=ctx.device)).pow(2).mean().backward()
    opt.step()
    return model, opt


@features.add("torch.save, torch.load(map_location=...)")
def save_load(ctx):
    need(ctx, "device")
    model, opt = trained(ctx)  # the same on every rank: same seed
    path = ctx.tmp / "checkpoint.pt"
    if ctx.rank == 0:
        torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, path)
    if dist.is_initialized():
        dist.barrier()
    else:  # no process group (see the init_process_group feature): wait for the file
        wait_for(path)
    want = model.state_dict()
    dev = ctx.args.device
    # the DDP tutorial's remapping of what rank 0 saved from device 0 to this rank's device
    for location, on in (({f"{dev}:0": str(ctx.device)}, ctx.device), (ctx.device, ctx.device),
                         ("cpu", torch.device("cpu"))):
        ckpt = torch.load(path, map_location=location)
        for k, v in ckpt["model"].items():
            if v.device != on or not torch.equal(v.cpu(), want[k].cpu()):
                return f"map_location={location!r}: {k} loaded on {v.device}, expected {on}"
        momentum = ckpt["optim"]["state"][0]["momentum_buffer"]
        if momentum.device != on:
            return f"map_location={location!r}: optimizer state on {momentum.device}, expected {on}"
    fresh = Net().to(ctx.device)
    fresh.load_state_dict(torch.load(path, map_location={f"{dev}:0": str(ctx.device)})["model"])
    x = torch.randn(4, 32, device=ctx.device)
    if not torch.equal(fresh(x).cpu(), model(x).cpu()):
        return "the reloaded model computes something else"
    return None


def wait_for(path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0 did not write {path.name}")
        time.sleep(0.1)
    time.sleep(0.5)  # torch.save writes the file in one go; let it finish


# ---- tensor parallelism and FSDP2 on the node's device mesh -----------------------------------


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden)
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class Attention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds its share of them
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, n_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FeedForward(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, n_layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(DIM, HEADS) for _ in range(n_layers))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx):
        h = self.tok(idx)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def tokens(seed, device):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return idx[:, :-1].to(device), idx[:, 1:].to(device)


def full_params(model):
    """Every parameter as one whole tensor (DTensors gathered), for the per-step records."""
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v)
            for k, v in model.named_parameters()}


def train(ctx, name, model, opt, data_seed, step0=0, steps=STEPS):
    for step in range(step0 + 1, step0 + steps + 1):
        x, y = tokens(data_seed + step, ctx.device)
        logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        features.record(name, step, loss, full_params(model))
    return loss


@features.add("init_device_mesh(device, (2,))", reference=True)
def device_mesh(ctx):
    need(ctx, "device")
    # on the group the bare init_process_group() started; without one it starts it the same way
    ctx.mesh = init_device_mesh(ctx.args.device, (int(os.environ["WORLD_SIZE"]),))
    if ctx.mesh.device_type != ctx.device.type:
        return f"the mesh is on {ctx.mesh.device_type}"
    t = DTensor.from_local(torch.ones(2, device=ctx.device), ctx.mesh, [Shard(0)])
    full = t.full_tensor()
    if full.device.type != ctx.device.type or full.cpu().tolist() != [1.0] * 4:
        return f"full_tensor of a sharded DTensor gave {full}"
    return None


@features.add("tensor parallel MLP: ColwiseParallel, RowwiseParallel", compare=True)
def tp_mlp(ctx):
    need(ctx, "mesh")
    torch.manual_seed(0)
    model = FeedForward(DIM, 4 * DIM).to(ctx.device)
    model = parallelize_module(model, ctx.mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    if not isinstance(model.w1.weight, DTensor) or model.w1.weight.placements != (Shard(0),):
        return "w1.weight is not sharded by rows"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for step in range(1, STEPS + 1):
        x = torch.randn(BATCH, SEQ, DIM, generator=g).to(ctx.device)  # the same input on every rank
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        features.record("tensor parallel MLP: ColwiseParallel, RowwiseParallel", step, loss,
                        full_params(model))
    return None


@features.add("tensor parallel attention block, sequence parallel", compare=True)
def tp_attention_sp(ctx):
    need(ctx, "mesh")
    torch.manual_seed(0)
    model = TinyLM(n_layers=1).to(ctx.device)
    parallelize_module(model, ctx.mesh, {
        "tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    for block in model.blocks:
        parallelize_module(block, ctx.mesh, {
            "norm1": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attn.wq": ColwiseParallel(),
            "attn.wk": ColwiseParallel(),
            "attn.wv": ColwiseParallel(),
            "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
            "norm2": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.w1": ColwiseParallel(),
            "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
        })
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train(ctx, "tensor parallel attention block, sequence parallel", model, opt, data_seed=10)
    return None


def fsdp_model(ctx, mp_policy=None):
    torch.manual_seed(0)
    model = TinyLM().to(ctx.device)
    kwargs = {"mesh": ctx.mesh}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    for block in model.blocks:
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


@features.add("FSDP2 fully_shard", compare=True)
def fsdp2(ctx):
    need(ctx, "mesh")
    model = fsdp_model(ctx)
    w = model.tok.weight
    if not isinstance(w, DTensor) or w.to_local().shape[0] != VOCAB // ctx.mesh.size():
        return "parameters are not sharded"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    train(ctx, "FSDP2 fully_shard", model, opt, data_seed=100 * (ctx.rank + 1))
    return None


MP = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


@features.add("FSDP2 MixedPrecisionPolicy(bfloat16)", compare=True)
def fsdp2_mixed_precision(ctx):
    need(ctx, "mesh")
    model = fsdp_model(ctx, MP)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    seen = []
    hook = model.head.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    train(ctx, "FSDP2 MixedPrecisionPolicy(bfloat16)", model, opt, data_seed=200 * (ctx.rank + 1))
    hook.remove()
    if seen[0] != torch.bfloat16:
        return f"the forward ran in {seen[0]}"
    ctx.fsdp_trained = (model, opt)
    return None


@features.add("FSDP2 + torch.distributed.checkpoint save/load, resumed step", compare=True)
def fsdp2_dcp(ctx):
    need(ctx, "mesh")
    if ctx.fsdp_trained is None:
        raise RuntimeError("no trained FSDP2 model: see the mixed-precision feature")
    model, opt = ctx.fsdp_trained
    path = ctx.tmp / "fsdp2-dcp"
    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)

    fresh = fsdp_model(ctx, MP)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    model_sd, optim_sd = get_state_dict(fresh, fresh_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    for (k, a), b in zip(full_params(model).items(), full_params(fresh).values()):
        if b.device.type != ctx.device.type or not torch.equal(a.cpu(), b.cpu()):
            return f"{k} differs after load"
    # one more step from the checkpoint and from the live model: the same numbers
    name = "FSDP2 + torch.distributed.checkpoint save/load, resumed step"
    seed = 200 * (ctx.rank + 1)
    resumed = train(ctx, name, fresh, fresh_opt, data_seed=seed, step0=STEPS, steps=1)
    live = train(ctx, "_live", model, opt, data_seed=seed, step0=STEPS, steps=1)
    if not torch.equal(resumed.cpu(), live.cpu()):
        return f"the resumed step's loss {resumed.item()} is not the live model's {live.item()}"
    features.records.pop("_live")
    return None


# ---- torch.compile ---------------------------------------------------------------------------


@features.add("torch.compile(model)")
def compile_model(ctx):
    need(ctx, "device")
    torch.manual_seed(0)
    eager = Net().to(ctx.device)
    model = copy.deepcopy(eager)
    compiled = torch.compile(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (compiled, eager)]
    g = torch.Generator().manual_seed(200 + ctx.rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x = torch.randn(16, 32, generator=g).to(ctx.device)
            losses = []
            for m, opt in zip((compiled, eager), opts):
                loss = m(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss)
            # compiled kernels round differently from eager ones: float32 tolerances, not bits
            torch.testing.assert_close(losses[0].cpu(), losses[1].cpu())
    for a, b in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(a.cpu(), b.cpu())
    if any("no code generator" in str(w.message) for w in caught):
        return "pass: the graphs ran eagerly (no Inductor code generator for the device)"
    return None


def main(argv=None):
    args = harness.parse_args(__doc__, argv)
    ctx = SimpleNamespace(args=args, device=None, mesh=None, fsdp_trained=None,
                          missing={"mesh": "see the init_device_mesh feature"},
                          tmp=harness.work_dir(args), rank=int(os.environ.get("RANK", "0")))
    try:
        ctx.device = harness.local_device(args)
    except Exception as e:  # the LOCAL_RANK feature reports it; the others say why they stop
        ctx.missing["device"] = harness.short_error(e)[len("error: "):]
    results = features.run(ctx, args)
    features.write(args, results)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
