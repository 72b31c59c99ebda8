#!/usr/bin/env python3
"""Train a tiny transformer language model with DDP, written the way CUDA training scripts are.

The device string is the only switch:

    torchrun --standalone --nproc-per-node 2 examples/train_tiny_lm.py --device cuda
    torchrun --standalone --nproc-per-node 2 examples/train_tiny_lm.py --device hal
    TORCH_HAL_BACKEND=trainium \\
    torchrun --standalone --nproc-per-node 2 examples/train_tiny_lm.py --device neuron
    torchrun --standalone --nproc-per-node 2 examples/train_tiny_lm.py --device cpu

(``hal`` and ``neuron`` are torch_hal devices: torch loads torch_hal at ``import torch``, so
nothing here imports it.) Without torchrun it runs as a single process.

What it uses, as a CUDA script would: a 2-layer GPT-style model (d_model 64, 2 heads, context
32) on a synthetic corpus generated from a fixed seed; AMP (torch.autocast, bfloat16) with
torch.amp.GradScaler; a DataLoader with pin_memory=True and non_blocking copies; activation
checkpointing (non-reentrant) of blocks that use dropout; DistributedDataParallel with the
device's default process-group backend; AdamW with warmup; gradient clipping; checkpoint save
and resume (model, optimizer, scheduler, scaler, data position and every rank's RNG states);
per-step losses logged to a JSON file (--loss-log).

Same math on every device. The losses of a ``--device cpu`` run and of a device run with the
same seed are meant to be identical, so the script avoids the places where the device and the
CPU would run different kernels:
  * autocast: CPU and CUDA-style devices cast different operator lists to bfloat16. The
    operators whose policies differ (layer_norm, softmax, log_softmax, cross_entropy) are given
    fp32 inputs explicitly (the residual stream is fp32, softmax and the loss are computed in
    fp32, as most LM code does anyway), so both devices run the same kernels on the same types.
  * dropout: torch picks a fused kernel (native_dropout) on accelerators and a composite one on
    CPU; in fp32 both give the same values, in bfloat16 they do not, so dropout is applied to
    fp32 tensors.
  * optimizer: foreach=True explicitly (its default is the for-loop on CPU and foreach on
    accelerators); the data loader has its own torch.Generator, so it does not draw from the
    RNG that dropout uses (the CPU generator on CPU, the device generator on the device).

Where unpatched torch 2.13 still assumes CUDA, and what this script passes instead
--------------------------------------------------------------------------------------
  1. torch.amp.GradScaler(device.type)
       GradScaler's `device` argument defaults to "cuda": GradScaler() on any other device
       makes a scaler for CUDA (disabled, with a warning, when CUDA is absent).
  2. torch.random.fork_rng(devices=[...], device_type=device.type)   (model initialisation)
       Without `device_type` it forks the current accelerator's RNG, and "cuda" when there is
       none; a CPU run on a machine with an accelerator would fork that accelerator instead.
  3. torch.autograd.graph.save_on_cpu(pin_memory=..., device_type=device.type)
     (--offload-activations)
       `device_type` defaults to "cuda" and an unknown device falls back to torch.cuda, so
       without it pinning is decided by torch.cuda.is_available().
  4. torch.utils.checkpoint.checkpoint(..., use_reentrant=False, preserve_rng_state=True)
       `use_reentrant` has to be passed explicitly. The device whose RNG state is stashed and
       restored for the recomputation is inferred from the tensor arguments (the block input
       is on `device`), so checkpoint's internal "cuda" defaults (_get_device_module,
       _get_autocast_kwargs) are not reached; its fallback device type when no argument is on
       an accelerator is torch.accelerator.current_accelerator() in 2.13.
  Not CUDA hardcodes, but device-specific by nature: DDP(device_ids=[index]) on accelerators;
  torch.autocast(device.type, ...); dist.init_process_group(device_id=device) on accelerators
  (the device's default backend: nccl for cuda, torch_hal's for hal/neuron) and "gloo" named for
  CPU runs (without a backend or device_id, 2.13 picks the accelerator's backend, which does
  not serve CPU tensors).
"""

import argparse
import contextlib
import datetime
import gc
import itertools
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset, DistributedSampler


# ---- Data ---------------------------------------------------------------------------------------

def make_corpus(num_tokens, vocab_size, seed):
    """A synthetic language: a Markov chain over `vocab_size` symbols.

    Every symbol has three likely successors (probabilities 0.6, 0.25 and 0.15), so the entropy
    is about 0.94 nats per token: the loss falls from ln(vocab) = 4.16 toward that. Generated
    with Python's random.Random(seed), which is stable across platforms and versions.
    """
    rng = random.Random(seed)
    successors = [rng.sample(range(vocab_size), 3) for _ in range(vocab_size)]
    weights = (0.6, 0.25, 0.15)
    tokens = [rng.randrange(vocab_size)]
    for _ in range(num_tokens - 1):
        tokens.append(rng.choices(successors[tokens[-1]], weights)[0])
    return torch.tensor(tokens, dtype=torch.long)


class TokenWindows(Dataset):
    """Non-overlapping windows of `context` tokens and their next-token targets."""

    def __init__(self, tokens, context):
        self.tokens = tokens
        self.context = context

    def __len__(self):
        return (len(self.tokens) - 1) // self.context

    def __getitem__(self, i):
        chunk = self.tokens[i * self.context:(i + 1) * self.context + 1]
        return chunk[:-1], chunk[1:]


# ---- Model --------------------------------------------------------------------------------------

@dataclass
class Config:
    vocab_size: int = 64
    context: int = 32
    d_model: int = 64
    n_heads: int = 2
    n_layers: int = 2
    d_ff: int = 256
    dropout: float = 0.1


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
                   for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.n_heads))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        probs = self.attn_drop(F.softmax(scores, dim=-1, dtype=torch.float32))
        y = probs.to(v.dtype) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff)
        self.out = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x):
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        # The residual stream stays fp32; each branch's output joins it (and its dropout runs)
        # in fp32.
        x = x + self.drop(self.attn(self.ln1(x)).float())
        x = x + self.drop(self.mlp(self.ln2(x)).float())
        return x


class TinyLM(nn.Module):
    def __init__(self, cfg, activation_checkpointing=True):
        super().__init__()
        self.cfg = cfg
        self.activation_checkpointing = activation_checkpointing
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        for block in self.blocks:
            if self.activation_checkpointing and self.training:
                # Recomputed in backward; preserve_rng_state replays the same dropout masks.
                x = checkpoint(block, x, use_reentrant=False, preserve_rng_state=True)
            else:
                x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(logits, targets):
    # The loss in fp32 on every device (logits are bfloat16 under autocast).
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


# ---- Setup --------------------------------------------------------------------------------------

def setup_distributed(device_type, timeout_s=None):
    """Process group and this rank's device. Returns (device, rank, world_size, local_rank).
    timeout_s: the process group's timeout (None: torch's default)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cpu":
        device = torch.device("cpu")
    else:
        # One device per process. (Ranks that see a single device each, e.g. NeuronCores given
        # out per process through NEURON_RT_VISIBLE_CORES, all use index 0.)
        index = local_rank % torch.get_device_module(device_type).device_count()
        torch.get_device_module(device_type).set_device(index)
        device = torch.device(device_type, index)
    if world_size > 1:
        timeout = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
        if device.type == "cpu":
            dist.init_process_group("gloo", **timeout)
        else:
            dist.init_process_group(device_id=device, **timeout)  # the device's default backend
        return device, dist.get_rank(), dist.get_world_size(), local_rank
    return device, 0, 1, local_rank


def build(args, device, rank, world_size):
    """Model (DDP-wrapped when distributed), optimizer, scheduler, scaler and data loader."""
    cfg = Config()
    # The same initial weights on every rank and every device (initialised on the CPU under
    # the run's seed), without disturbing the RNG streams the ranks train with.
    fork_devices = [device.index] if device.type != "cpu" else []
    with torch.random.fork_rng(devices=fork_devices, device_type=device.type):
        torch.manual_seed(args.seed)
        model = TinyLM(cfg, activation_checkpointing=not args.no_checkpointing)
    model = model.to(device)
    if world_size > 1:
        model = DDP(model, device_ids=[device.index] if device.type != "cpu" else None)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(0.9, 0.95), foreach=True)
    warmup = max(1, args.warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup))
    scaler = torch.amp.GradScaler(device.type)  # 2.13: the device must be named (else "cuda")

    tokens = make_corpus(args.corpus_tokens, cfg.vocab_size, args.data_seed)
    dataset = TokenWindows(tokens, cfg.context)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                        pin_memory=True, num_workers=0,
                        generator=torch.Generator().manual_seed(args.seed))
    return model, optimizer, scheduler, scaler, sampler, loader


def rng_state(device):
    state = {"cpu": torch.get_rng_state()}
    if device.type != "cpu":
        state["device"] = torch.get_device_module(device.type).get_rng_state(device)
    return state


def set_rng_state(device, state):
    # RNG states are CPU byte tensors (map_location moved them to the device).
    torch.set_rng_state(state["cpu"].cpu())
    if device.type != "cpu":
        torch.get_device_module(device.type).set_rng_state(state["device"].cpu(), device)


def unwrap(model):
    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    return model.module if isinstance(model, DDP) else model


def save_checkpoint(path, step, epoch, batch_in_epoch, model, optimizer, scheduler, scaler,
                    device, world_size):
    states = [None] * world_size
    if world_size > 1:
        dist.all_gather_object(states, rng_state(device))  # every rank's RNG streams
    else:
        states[0] = rng_state(device)
    if int(os.environ.get("RANK", "0")) == 0:
        tmp = path + ".tmp"
        torch.save({
            "step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch,
            "model": unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
            "rng": states, "world_size": world_size,
        }, tmp)
        os.replace(tmp, path)
    if world_size > 1:
        dist.barrier()


def load_checkpoint(path, model, optimizer, scheduler, scaler, device, rank, world_size):
    ckpt = torch.load(path, map_location=device)
    if ckpt["world_size"] != world_size:
        raise SystemExit(f"{path} was written by {ckpt['world_size']} ranks, not {world_size}")
    unwrap(model).load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    scaler.load_state_dict(ckpt["scaler"])
    set_rng_state(device, ckpt["rng"][rank])
    return ckpt["step"], ckpt["epoch"], ckpt["batch_in_epoch"]


def memory_summary(device):
    if device.type == "cpu":
        return None
    stats = torch.get_device_module(device.type).memory_stats(device)
    return {
        "peak_allocated_bytes": stats.get("allocated_bytes.all.peak", 0),
        "peak_reserved_bytes": stats.get("reserved_bytes.all.peak", 0),
        "allocated_bytes": stats.get("allocated_bytes.all.current", 0),
        "reserved_bytes": stats.get("reserved_bytes.all.current", 0),
    }


# ---- Training -------------------------------------------------------------------------------------

def synchronize(device):
    if device.type != "cpu":
        torch.get_device_module(device.type).synchronize(device)


def train_step(model, optimizer, scheduler, scaler, x, y, device, clip=1.0):
    """One optimisation step; returns the loss tensor (not synchronised)."""
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        loss = lm_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    return loss


def batches(loader, sampler, epoch, skip):
    """(epoch, index in epoch, x, y) forever, starting `skip` batches into `epoch`."""
    while True:
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(itertools.islice(loader, skip, None), start=skip):
            yield epoch, i, x, y
        epoch, skip = epoch + 1, 0


def device_program_share():
    """Of the aten nodes of the graphs torch.compile lowered to StableHLO programs (a device
    that takes them, such as neuron), how many ran as device programs; None elsewhere."""
    graph_compiler = sys.modules.get("torch_hal.graph_compiler")
    reports = graph_compiler.reports() if graph_compiler else []
    if not reports:
        return None
    return {"lowered": sum(r.lowered for _, _, r in reports),
            "total": sum(r.total for _, _, r in reports),
            "draws": sum(getattr(r, "draws", 0) for _, _, r in reports),
            "replays": sum(getattr(r, "replays", 0) for _, _, r in reports),
            "graphs": [f"{kind}: {r}" for _, kind, r in reports]}


def write_log(path, log):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(log, f, indent=1)
        os.replace(tmp, path)


def train(args):
    device, rank, world_size, local_rank = setup_distributed(args.device, args.timeout)
    # Each rank draws its own dropout masks (CPU and device generators alike).
    torch.manual_seed(args.seed + 1000 * rank)
    model, optimizer, scheduler, scaler, sampler, loader = build(args, device, rank, world_size)
    if args.compile:
        model = torch.compile(model)

    step, epoch, batch_in_epoch = 0, 0, 0
    if args.resume and args.checkpoint and os.path.exists(args.checkpoint):
        step, epoch, batch_in_epoch = load_checkpoint(args.checkpoint, model, optimizer,
                                                      scheduler, scaler, device, rank,
                                                      world_size)
        if rank == 0:
            print(f"resumed from {args.checkpoint} at step {step}", flush=True)

    log = {"device": str(device), "device_type": device.type, "world_size": world_size,
           "compiled": bool(args.compile),
           "seed": args.seed, "config": asdict(Config()), "batch_size_per_rank": args.batch_size,
           "torch": torch.__version__, "resumed_at": step if args.resume else None,
           "steps": []}
    if args.resume and args.loss_log and os.path.exists(args.loss_log):
        with open(args.loss_log) as f:
            log["steps"] = [s for s in json.load(f).get("steps", []) if s["step"] <= step]

    offload = (torch.autograd.graph.save_on_cpu(pin_memory=device.type != "cpu",
                                                device_type=device.type)
               if args.offload_activations else contextlib.nullcontext())
    model.train()
    data = batches(loader, sampler, epoch, batch_in_epoch)
    while step < args.steps:
        start = time.perf_counter()
        epoch, i, x, y = next(data)
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        with offload:
            loss = train_step(model, optimizer, scheduler, scaler, x, y, device)
        loss_value = loss.item()
        synchronize(device)
        elapsed = time.perf_counter() - start
        step += 1
        batch_in_epoch = i + 1
        if rank == 0:
            log["steps"].append({"step": step, "loss": loss_value, "time_s": elapsed,
                                 "lr": scheduler.get_last_lr()[0], "scale": scaler.get_scale()})
            if step % args.print_every == 0 or step == args.steps:
                print(f"[{device.type}] step {step:4d}/{args.steps}  loss {loss_value:.6f}  "
                      f"{elapsed * 1000:7.1f} ms", flush=True)
        if args.checkpoint and args.checkpoint_every and step % args.checkpoint_every == 0:
            save_checkpoint(args.checkpoint, step, epoch, batch_in_epoch, model, optimizer,
                            scheduler, scaler, device, world_size)
        if rank == 0 and step % 10 == 0:
            write_log(args.loss_log, log)

    if rank == 0:
        log["memory"] = memory_summary(device)
        log["device_programs"] = device_program_share()
        write_log(args.loss_log, log)
    if world_size > 1:
        # DDP's Reducer holds the process group. Were it the last holder, the group would be
        # freed with the GIL held, and gloo's destructor joins its worker threads while one of
        # them may wait for the GIL to free a finished collective (torch 2.13 keeps a Python
        # object in the state each collective of a backward captures): a deadlock at exit.
        # Freeing the model first leaves the last reference to destroy_process_group, whose
        # destructor runs without the GIL.
        del model
        gc.collect()
        dist.destroy_process_group()
    return log


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", required=True, help="cuda, cpu, hal, neuron, ...")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--data-seed", type=int, default=7)
    p.add_argument("--corpus-tokens", type=int, default=200_000)
    p.add_argument("--loss-log", default=None, help="JSON file of per-step losses (rank 0)")
    p.add_argument("--checkpoint", default=None, help="checkpoint file")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps (0: never)")
    p.add_argument("--resume", action="store_true", help="resume from --checkpoint if present")
    p.add_argument("--no-checkpointing", action="store_true",
                   help="disable activation checkpointing")
    p.add_argument("--offload-activations", action="store_true",
                   help="keep saved activations in (pinned) CPU memory (save_on_cpu)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (no backend argument: Inductor)")
    p.add_argument("--print-every", type=int, default=1)
    p.add_argument("--timeout", type=float, default=None,
                   help="process group timeout in seconds (default: torch's)")
    return p.parse_args(argv)


if __name__ == "__main__":
    train(parse_args())
