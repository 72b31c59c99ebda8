"""A model zoo trained on the device: compiled on a device that generates code, eager elsewhere.

Each model (zoo_models.py: transformers' GPT-2, Llama and BERT from small configs, a Llama-style
block under bfloat16 autocast, a small ResNet, an LSTM, a mixture-of-experts layer) takes a
forward, a backward and three optimizer steps (SGD with momentum), and its losses, gradients and
parameters are compared with the CPU's:
- compiled (torch.compile with no backend argument, on a device that generates code: the cpu
  backend) against the CPU's compiled run: bitwise where the CPU's compiled run is bitwise with
  its eager run, else within the CPU's own compiled-vs-eager deviation (twice it, for the
  rounding of the other side);
- eager (every backend, the Trainium one included) against the CPU's eager run, bitwise (the
  device runs the CPU's kernels) but for the LSTM (EAGER_TOLERANCE).
test_distributed.py trains one of them (the Llama-style block) with FSDP2 and torch.compile on
two ranks.
"""

import os

import pytest
import torch
import torch.nn.functional as F

import torch_hal.programs as programs
from zoo_models import (VOCAB, LlamaStyleBlock, LstmTagger, MoELayer, SmallResNet,
                        transformers_model)

STEPS = 3


# name -> (model factory, batch maker, loss from (model, batch), autocast dtype or None)
def _lm_batch(generator):
    return (torch.randint(0, VOCAB, (2, 12), generator=generator),)


def _hf_loss(model, batch):
    tokens = batch[0]
    return model(input_ids=tokens, labels=tokens).loss


def _token_loss(model, batch):
    tokens = batch[0]
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, -2).float(), tokens.flatten() % logits.shape[-1])


def _image_batch(generator):
    return (torch.randn(4, 3, 16, 16, generator=generator),
            torch.randint(0, 10, (4,), generator=generator))


def _image_loss(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])


ZOO = {
    "gpt2": (lambda: transformers_model("gpt2"), _lm_batch, _hf_loss, None),
    "llama": (lambda: transformers_model("llama"), _lm_batch, _hf_loss, None),
    "bert": (lambda: transformers_model("bert"), _lm_batch, _hf_loss, None),
    "llama_block_bf16": (LlamaStyleBlock, _lm_batch, _token_loss, torch.bfloat16),
    "resnet": (SmallResNet, _image_batch, _image_loss, None),
    "lstm": (LstmTagger, _lm_batch, _token_loss, None),
    "moe": (MoELayer, _lm_batch, _token_loss, None),
}

# Eager on the device is the CPU's kernels, bit for bit, except where the bridge computes an
# operator itself: the fused LSTM cell (bridge/csrc/aten/Rnn.cpp, CUDA's formulas, which the
# CPU's unfused cell rounds differently), within float32 rounding.
EAGER_TOLERANCE = {"lstm": 1e-6}

# Each model compiles twice (the CPU's compiled run and the device's, forward and backward),
# 10 to 70 s a model on two CPUs with Inductor's caches cold: the compiled zoo is `make
# test-zoo`'s (TORCH_HAL_ZOO=all, or a comma-separated list of names; marker zoo), and `make
# test` runs the eager zoo (test_compile.py compiles an attention block).
def _compiled_names():
    chosen = os.environ.get("TORCH_HAL_ZOO", "all")
    if chosen == "all":
        return list(ZOO)
    names = [n for n in chosen.split(",") if n]
    unknown = sorted(set(names) - set(ZOO))
    if unknown:
        raise ValueError(f"TORCH_HAL_ZOO: no model {unknown} in the zoo ({', '.join(ZOO)})")
    return names


def train(name, device, compiled):
    """Three optimizer steps of the zoo's model `name` on `device`: the losses, the first step's
    gradients and the final parameters, on the CPU."""
    factory, make_batch, loss_fn, autocast_dtype = ZOO[name]
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = factory().to(device)
    model.train()
    # SGD with momentum: its update is linear in the gradients, so a rounding difference in a
    # gradient stays that size in the parameters (Adam's normalisation would magnify it).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    generator = torch.Generator().manual_seed(1)
    batches = [tuple(t.to(device) for t in make_batch(generator)) for _ in range(STEPS)]

    def step(batch):
        with torch.autocast(device.type, dtype=autocast_dtype or torch.float32,
                            enabled=autocast_dtype is not None):
            return loss_fn(model, batch)

    step_fn = torch.compile(step) if compiled else step
    losses, first_grads = [], None
    for batch in batches:
        loss = step_fn(batch)
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters()
                           if p.grad is not None}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().cpu())
    torch._dynamo.reset()
    params = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return {"losses": torch.stack(losses), "grads": first_grads, "params": params}


def _flat(result):
    yield "losses", result["losses"]
    for kind in ("grads", "params"):
        for name, tensor in result[kind].items():
            yield f"{kind}.{name}", tensor


def _deviation(a, b):
    return max((x - y).abs().max().item() for (_, x), (_, y) in zip(_flat(a), _flat(b)))


def assert_same(got, want, atol, what):
    assert got["grads"].keys() == want["grads"].keys(), what
    for (name, g), (_, w) in zip(_flat(got), _flat(want)):
        if atol == 0:
            assert torch.equal(g, w), f"{what}: {name} differs (largest {(g - w).abs().max()})"
        else:
            torch.testing.assert_close(g, w, rtol=0, atol=atol,
                                       msg=lambda m: f"{what}: {name}: {m}")


GENERATES = "host_elf" in programs.formats()


@pytest.mark.zoo
@pytest.mark.parametrize("name", _compiled_names())
def test_compiled_matches_cpu_compiled(device, name):
    cpu_eager = train(name, torch.device("cpu"), compiled=False)
    cpu_compiled = train(name, torch.device("cpu"), compiled=True)
    got = train(name, device, compiled=True)
    own = _deviation(cpu_compiled, cpu_eager)
    assert_same(got, cpu_compiled, 2 * own, f"{name} compiled on {device} vs on the CPU "
                f"(the CPU's compiled vs eager: {own:.3g})")


@pytest.mark.parametrize("name", list(ZOO))
def test_eager_matches_cpu_eager(device, name):
    assert_same(train(name, device, compiled=False), train(name, torch.device("cpu"), False),
                EAGER_TOLERANCE.get(name, 0), f"{name} eager on {device} vs on the CPU")


if not GENERATES:
    # Not collected where the device generates no C++ (Trainium: torch.compile lowers to
    # StableHLO there, test_compile_stablehlo.py): it would pass without testing.
    del test_compiled_matches_cpu_compiled
