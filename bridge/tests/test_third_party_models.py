"""Third-party models compute on the device bit for bit what they compute on the CPU.

The device runs PyTorch's CPU kernels, so a model that takes the same paths on both gives the
same bits, however long it trains. The model here is Hugging Face transformers' GPT-2, built from
a small GPT2Config (nothing is downloaded), trained with AdamW, dropout on, and then asked for a
greedy generation from a left-padded batch. Each place where the device once took another path
than the CPU has a focused test below: tied weights lost in Module.to(), the optimizers' default
implementation, the intra-op threads of autograd's device worker, and the attention kernel
(test_cuda_parity.py, test_sdpa_is_bit_exact_with_cpu).
"""

import os
import threading

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never reach the Hub

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

transformers.logging.set_verbosity_error()

STEPS = 20
VOCAB = 96


def _config():
    # GPT-2's defaults (dropout 0.1 everywhere, tied input and output embeddings), smaller.
    return GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                      bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, pad_token_id=VOCAB - 1)


def _train_and_generate(device):
    torch.manual_seed(0)  # the same initial weights on both
    model = GPT2LMHeadModel(_config()).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = torch.randint(0, VOCAB - 1, (STEPS, 4, 16),
                            generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)  # the CPU's and the devices' generators: the same dropout masks
    losses = []
    model.train()
    for batch in batches:
        batch = batch.to(device)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach().cpu())
    model.eval()
    # A left-padded batch: the attention mask and position ids take their padded paths.
    prompts = torch.randint(0, VOCAB - 1, (2, 6), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 6, dtype=torch.long)
    prompts[1, :2], mask[1, :2] = VOCAB - 1, 0
    with torch.no_grad():
        generated = model.generate(prompts.to(device), attention_mask=mask.to(device),
                                   max_new_tokens=12, do_sample=False, min_new_tokens=12,
                                   output_scores=True, return_dict_in_generate=True)
    return {"losses": torch.stack(losses), "sequences": generated.sequences.cpu(),
            "scores": torch.stack(generated.scores).cpu(),
            "weights": {name: p.detach().cpu() for name, p in model.named_parameters()},
            "tied": model.lm_head.weight is model.transformer.wte.weight}


def test_gpt2_trains_and_generates_bit_exactly(device_type):
    cpu = _train_and_generate("cpu")
    dev = _train_and_generate(device_type)
    assert dev["tied"] and cpu["tied"]
    differing = [step for step, (a, b) in enumerate(zip(cpu["losses"], dev["losses"]))
                 if not torch.equal(a, b)]
    assert not differing, (f"losses differ from step {differing[0]} on: "
                           f"{dev['losses'] - cpu['losses']}")
    assert cpu["weights"].keys() == dev["weights"].keys()
    for name, weight in cpu["weights"].items():
        assert torch.equal(weight, dev["weights"][name]), name
    assert torch.equal(cpu["scores"], dev["scores"])
    assert torch.equal(cpu["sequences"], dev["sequences"])


# ---- Tied weights ----------------------------------------------------------------------------

def test_module_to_keeps_tied_parameters(device_type):
    """Module.to() moves each Parameter in place, as for CUDA: weights two modules share stay one
    Parameter (GPT-2's embedding and output layer), and an optimizer made before the move keeps
    training the moved parameters."""
    embedding = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = embedding.weight
    model = torch.nn.Sequential(embedding, head)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    weight = embedding.weight
    model.to(device_type)
    assert head.weight is embedding.weight is weight
    assert weight.device.type == device_type and len(list(model.parameters())) == 1
    model(torch.tensor([1, 2], device=device_type)).sum().backward()
    before = weight.detach().cpu().clone()
    optimizer.step()
    assert not torch.equal(weight.detach().cpu(), before)
    model.to("cpu")  # and back
    assert head.weight is embedding.weight is weight and weight.device.type == "cpu"


# ---- The optimizers' default implementation --------------------------------------------------

def _optimize(optimizer_class, device, steps=5, **options):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(7, 5).to(device)),
              torch.nn.Parameter(torch.randn(3).to(device))]
    optimizer = optimizer_class(params, lr=0.01, **options)
    grads = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=grads).to(device)
        optimizer.step()
    return [p.detach().cpu() for p in params], optimizer


# The optimizers whose multi-tensor (foreach) and per-tensor implementations round differently.
@pytest.mark.parametrize("name", ["ASGD", "NAdam", "RAdam", "AdamW"])
def test_optimizers_default_to_the_cpus_implementation(device_type, name):
    optimizer_class = getattr(torch.optim, name)
    cpu, _ = _optimize(optimizer_class, "cpu")
    dev, optimizer = _optimize(optimizer_class, device_type)
    assert optimizer.param_groups[0]["foreach"] is None  # the default was asked for...
    from torch.optim.optimizer import _default_to_fused_or_foreach

    params = optimizer.param_groups[0]["params"]
    assert _default_to_fused_or_foreach(params, False) == (False, False)  # ...and is the CPU's
    for a, b in zip(cpu, dev):
        assert torch.equal(a, b)
    # Asked for explicitly, the multi-tensor path runs (the CPU's foreach kernels).
    cpu_foreach, _ = _optimize(optimizer_class, "cpu", foreach=True)
    dev_foreach, _ = _optimize(optimizer_class, device_type, foreach=True)
    for a, b in zip(cpu_foreach, dev_foreach):
        assert torch.equal(a, b)


def test_averaged_model_averages_as_on_the_cpu(device_type):
    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Linear(6, 3).to(device)
        averaged = torch.optim.swa_utils.AveragedModel(model)
        for _ in range(4):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn(p.shape).to(device))
            averaged.update_parameters(model)
        return [p.detach().cpu() for p in averaged.parameters()]

    for a, b in zip(run("cpu"), run(device_type)):
        assert torch.equal(a, b)


# ---- Intra-op threads of autograd's device worker --------------------------------------------

def test_backward_uses_the_callers_intra_op_threads(device_type):
    """The device's backward runs on autograd's worker thread for the device; its kernels use as
    many intra-op threads as the thread that ran the forward, as the CPU's backward does (it
    runs on that thread). Before, the worker kept the count it started with: after a
    torch.set_num_threads() (DataLoader's pin-memory thread calls set_num_threads(1) before the
    first backward) reductions split differently and gradients differed in the last bits."""
    x = torch.randn(4096, 512)  # large enough for a reduction split across threads

    def grad_of_scale(device):
        scale = torch.ones((), device=device, requires_grad=True)
        (x.to(device) * scale).sum().backward()  # the gradient: one reduction over all of x
        return scale.grad.cpu()

    grad_of_scale(device_type)  # the device's autograd worker exists and has its thread count
    before = torch.get_num_threads()
    other = 1 if before > 1 else 2
    side = threading.Thread(target=torch.set_num_threads, args=(other,))
    side.start()  # as DataLoader's pin-memory thread does
    side.join()
    torch.set_num_threads(other)
    try:
        assert torch.equal(grad_of_scale("cpu"), grad_of_scale(device_type))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(grad_of_scale("cpu"), grad_of_scale(device_type))
