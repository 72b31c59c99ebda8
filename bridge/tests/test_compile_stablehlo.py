"""torch.compile on a device that takes StableHLO programs (torch_hal.graph_compiler).

On the trainium backend (the libnrt emulator: modules executed with XLA's CPU compiler, as
neuronx-cc would be given them) graphs are lowered with torch-mlir and run as HAL programs; on
the cpu backend (Inductor's C++ kernels) these tests are not collected. Each compares against
the same model run eagerly on the device: forward, backward, optimizer steps, a mutated input,
dropout, an op torch-mlir cannot lower, a recompilation on a new shape, the backend="neuron"
spelling, a second process hitting the NEFF cache (and, on the emulator, the lowering and
executable caches), and 40 training steps of GPT-2 and a Llama-style block against CPU
Inductor's own deviation from eager.
"""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_hal
from torch_hal import graph_compiler

pytestmark = pytest.mark.skipif(
    torch_hal.is_loaded() and "stablehlo" not in torch_hal.programs.formats(0),
    reason="the device does not take StableHLO programs (the cpu backend runs Inductor's C++ "
           "kernels); these run in the trainium run")


def _fresh():
    torch._dynamo.reset()


def _lowered_reports(since):
    return graph_compiler.reports()[since:]


def test_the_path_is_available(device):
    ok, why = graph_compiler.supported(device.index)
    assert ok, why


class Block(torch.nn.Module):
    """Linear + LayerNorm + GELU, a residual, and a second Linear."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.norm(self.fc1(x))))


def _train(model, x, steps, compiled):
    fn = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = fn(x).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_training_steps_match_eager(device):
    _fresh()
    torch.manual_seed(0)
    eager = Block().to(device)
    compiled = Block().to(device)
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(8, 16, device=device)
    before = len(graph_compiler.reports())
    want, want_params = _train(eager, x, 3, compiled=False)
    got, got_params = _train(compiled, x, 3, compiled=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(got_params, want_params):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    reports = _lowered_reports(before)
    kinds = {kind for _, kind, _ in reports}
    assert {"forward", "backward"} <= kinds, reports
    for _, kind, report in reports:
        assert report.lowered_fraction == 1.0, (kind, str(report))


def test_a_mutated_input_is_written_in_place(device):
    _fresh()

    def step(buf, x):
        buf.mul_(0.5).add_(x)
        return buf.sum()

    buf = torch.arange(6.0, device=device)
    ref = buf.clone()
    x = torch.ones(6, device=device)
    compiled = torch.compile(step)
    with torch.no_grad():
        out = compiled(buf, x)
        want = step(ref, x)
    torch.testing.assert_close(buf.cpu(), ref.cpu())
    torch.testing.assert_close(out.cpu(), want.cpu())


def test_dropout_draws_what_eager_draws(device):
    _fresh()

    def f(x):
        return F.dropout(x * 2, p=0.5, training=True) + 1

    x = torch.randn(64, device=device)
    torch.manual_seed(123)
    want = f(x)
    before = len(graph_compiler.reports())
    compiled = torch.compile(f)
    torch.manual_seed(123)
    got = compiled(x)
    torch.testing.assert_close(got.cpu(), want.cpu())
    assert torch.equal(got.cpu() == 1, want.cpu() == 1)  # the same mask
    report = _lowered_reports(before)[0][2]
    # The mask is drawn outside the program, the rest lowered (as AWS's backend does).
    assert report.draws == 1 and report.eager == 0 and report.lowered == report.total, \
        str(report)


def _checkpointed(x):
    def block(a):
        return F.dropout(torch.tanh(a) * 3, p=0.25, training=True) * a

    return torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False,
                                             preserve_rng_state=True).sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_checkpointed_dropout_is_drawn_outside_and_recomputed_in_the_backward(device, dtype):
    """Activation checkpointing wraps the forward's dropout in run_and_save_rng_state and its
    recomputation in run_with_rng_state: both masks are drawn outside the programs, the
    backward's from the forward's generator state, so outputs and gradients are eager's."""
    _fresh()
    x = torch.randn(6, 40, device=device, dtype=dtype)
    runs = []
    before = len(graph_compiler.reports())
    for fn in (_checkpointed, torch.compile(_checkpointed)):
        a = x.clone().requires_grad_(True)
        torch.manual_seed(7)
        out = fn(a)
        out.sum().backward()
        runs.append((out.detach().cpu(), a.grad.cpu()))
    (want, want_grad), (got, got_grad) = runs
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(got_grad, want_grad, **tol)
    assert torch.equal(got_grad == 0, want_grad == 0)  # the backward's mask is the forward's
    reports = {kind: r for _, kind, r in _lowered_reports(before)}
    assert set(reports) == {"forward", "backward"}
    for r in reports.values():
        assert r.draws == 1 and r.eager == 0 and r.lowered == r.total, str(r)
    assert reports["forward"].replays == 0 and "1 dropout mask(s) drawn" in str(reports["forward"])
    assert reports["backward"].replays == 1 and "drawn" not in str(reports["backward"])
    assert "1 dropout mask(s) replayed" in str(reports["backward"])


def test_the_backward_replays_the_forwards_kept_draw(device, monkeypatch):
    """A checkpointed dropout's replay in the backward takes the mask the forward drew from the
    same state instead of drawing it on the host again; nothing stays kept after the backward."""
    from torch_hal import stablehlo_dropout

    _fresh()
    draws = []
    real = stablehlo_dropout.draw_bernoulli
    monkeypatch.setattr(stablehlo_dropout, "draw_bernoulli",
                        lambda *a: draws.append(a) or real(*a))
    x = torch.randn(6, 40, device=device)
    runs = []
    for fn in (_checkpointed, torch.compile(_checkpointed)):
        a = x.clone().requires_grad_(True)
        torch.manual_seed(7)
        fn(a).sum().backward()
        runs.append(a.grad.cpu())
    torch.testing.assert_close(runs[1], runs[0])
    assert len(draws) == 1 and draws[0][1] == torch.uint8, draws  # the forward's, as bytes
    assert len(stablehlo_dropout._kept) == 0


def test_kept_draws_are_found_by_state_and_dropped_with_it(device):
    """The kept draws: found by the state tensor or an equal copy of it (a saved-tensor hook),
    for the same shape, dtype, device and p only, taken once; dropped when the state is freed.
    A replay that finds none draws from the state, the same numbers."""
    from torch_hal.stablehlo_dropout import (_KeptDraws, draw_bernoulli_from_state,
                                             draw_bernoulli_saving_state)

    kept = _KeptDraws()
    state = torch.get_device_module(device.type).get_rng_state()
    draw = torch.ones(3, device=device)
    key = ((3,), torch.uint8, str(device), 0.5)
    kept.keep(state, key, draw)
    assert kept.take(state, ((3,), torch.uint8, str(device), 0.25)) is None
    assert kept.take(state.clone(), key) is draw
    assert kept.take(state, key) is None and len(kept) == 0
    kept.keep(state, key, draw)
    del state
    assert len(kept) == 0

    module = torch.get_device_module(device.type)
    torch.manual_seed(11)
    saved, first = draw_bernoulli_saving_state([64], torch.uint8, device, 0.5)
    after = module.get_rng_state()
    replayed = draw_bernoulli_from_state(saved.clone(), [64], torch.uint8, device, 0.5)
    assert replayed is first  # kept
    fresh = draw_bernoulli_from_state(saved, [64], torch.uint8, device, 0.5)  # taken: drawn
    assert fresh is not first and torch.equal(fresh.cpu(), first.cpu())
    assert torch.equal(module.get_rng_state(), after)  # a replay leaves the generator as it was


MANY_INPUTS_CHILD = textwrap.dedent("""
    import torch, torch_hal
    device = torch.device(torch_hal.device_type(), 0)
    module = torch.get_device_module(device)
    torch.manual_seed(0)
    xs = [torch.randn(8, device=device) for _ in range(60)]

    def f(*xs):  # 60 inputs and 10 results: 70 tensors, more than one launch passes
        return tuple(sum(xs[i::10]).tanh() * (i + 1) for i in range(10))

    compiled = torch.compile(f)
    compiled(*xs)
    module.synchronize()
    marker = torch.empty(40 << 20, dtype=torch.uint8, device=device)  # a segment of its own
    outs = [compiled(*xs) for _ in range(3)]
    module.synchronize()
    for got in outs:
        for g, want in zip(got, f(*xs)):
            torch.testing.assert_close(g.cpu(), want.cpu())
    print("OK")
""")


@pytest.mark.own_backend_trainium
def test_a_graph_over_the_launch_limit_runs_as_one_program(traced_child):
    """A graph whose module passes more tensors than one launch takes (HAL_KERNEL_ARGS_MAX)
    still runs as one program per call: a few of its inputs are copied into one buffer on the
    device, which the module slices. The results are eager's."""
    calls = traced_child(MANY_INPUTS_CHILD)
    assert calls.count("kernel_launch") == 3, calls
    assert "stream_synchronize" not in calls, calls


def test_results_keep_eagers_strides(device):
    """A region's result that eager traced as a transpose gets eager's strides back (what
    follows it, or the caller, may depend on them), and an input traced so is passed as it is:
    the program takes and returns them in memory order, so no operator copies them."""
    _fresh()

    def f(x, w):
        return (x * 2).transpose(0, 2), torch.tanh(x).permute(1, 0, 2), w * 3

    x = torch.randn(4, 3, 5, device=device)
    w = torch.randn(5, 6, device=device).t()
    compiled = torch.compile(f)
    compiled(x, w)
    torch_hal._C._reset_fallback_stats()
    got = compiled(x, w)
    assert torch_hal._C._fallback_stats()["calls"] == 0
    for g, want in zip(got, f(x, w)):
        assert g.stride() == want.stride()
        torch.testing.assert_close(g.cpu(), want.cpu())


def test_random_ops_that_are_not_dropout_stay_eager_and_are_counted(device):
    """A random op other than dropout, checkpointed (under the random-state operators) or not,
    and a dropout of a non-contiguous tensor run eagerly, each counted in the report."""
    _fresh()

    def f(x):
        noisy = torch.utils.checkpoint.checkpoint(lambda a: a * torch.rand_like(a), x,
                                                  use_reentrant=False)
        return noisy + F.dropout(x.t(), p=0.5).t() + torch.randn_like(x)

    x = torch.randn(8, 6, device=device, requires_grad=True)
    torch.manual_seed(3)
    want = f(x)
    before = len(graph_compiler.reports())
    torch.manual_seed(3)
    got = torch.compile(f)(x)
    torch.testing.assert_close(got.detach().cpu(), want.detach().cpu())
    forward = next(r for _, kind, r in _lowered_reports(before) if kind == "forward")
    assert forward.draws == 0, str(forward)
    assert forward.eager_ops == {"run_and_save_rng_state(aten.rand_like.default)": 1,
                                 "aten.native_dropout.default": 1,
                                 "aten.randn_like.default": 1}, str(forward)
    assert forward.total == forward.lowered + 3, str(forward)
    assert "random op" in forward.reasons["run_and_save_rng_state(aten.rand_like.default)"]


def test_a_compiled_optimizer_step_runs_on_the_device_as_eager(device):
    """clip_grad_norm_ and AdamW (foreach, capturable, the learning rate a tensor, as a
    compiled optimizer step is written) compiled: every node runs in device programs, none of
    the _foreach_* operators eagerly through the host, and three steps give eager's parameters
    and moments. Its 40-odd parameters and states pass more tensors than one launch takes."""
    _fresh()
    torch.manual_seed(0)
    shapes = [(16, 16), (16,)] * 8

    def make():
        params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
        opt = torch.optim.AdamW(params, lr=torch.tensor(0.01), foreach=True, capturable=True)
        return params, opt

    eager_params, eager_opt = make()
    params, opt = make()
    with torch.no_grad():
        for p, q in zip(params, eager_params):
            p.copy_(q)

    def step(ps, o):
        torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
        o.step()

    compiled = torch.compile(step)
    before = len(graph_compiler.reports())
    for i in range(3):
        grads = [torch.randn(s, device=device) for s in shapes]
        for p, q, g in zip(params, eager_params, grads):
            p.grad, q.grad = g.clone(), g.clone()
        step(eager_params, eager_opt)
        compiled(params, opt)
    for p, q in zip(params, eager_params):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(opt.state[p][key].cpu(), eager_opt.state[q][key].cpu(),
                                       rtol=1e-5, atol=1e-6)
    reports = _lowered_reports(before)
    assert reports
    for _, _, report in reports:
        assert report.lowered == report.total and report.eager == 0, str(report)


HOST_INPUT_CHILD = textwrap.dedent("""
    import torch, torch_hal
    device = torch.device(torch_hal.device_type(), 0)
    module = torch.get_device_module(device)
    f = torch.compile(lambda x, lr: x * lr + 1)
    x = torch.randn(64, device=device)
    lr = torch.tensor(0.5)
    f(x, lr)
    module.synchronize()
    marker = torch.empty(40 << 20, dtype=torch.uint8, device=device)  # a segment of its own
    outs = []
    for i in range(4):
        lr.fill_(0.5 + i)
        outs.append(f(x, lr))
        lr.fill_(-100.0)  # the call took the value it was given
    module.synchronize()
    for i, out in enumerate(outs):
        torch.testing.assert_close(out.cpu(), x.cpu() * (0.5 + i) + 1)
    print("OK")
""")


@pytest.mark.own_backend_trainium
def test_a_host_input_is_passed_without_waiting_for_the_device(traced_child):
    """A graph input on the host (an optimizer's learning rate as a CPU tensor) goes to the
    device through pinned memory without draining the stream: four compiled calls make no
    stream synchronisation (the trace layer's record), and each call uses the value it was
    given, whatever the caller writes into the tensor after it."""
    calls = traced_child(HOST_INPUT_CHILD)
    assert calls.count("kernel_launch") == 4, calls
    assert "stream_synchronize" not in calls, calls


def test_an_op_torch_mlir_cannot_lower_runs_eagerly(device):
    _fresh()

    def f(x):
        return torch.fmod(x * 3, 2.5) + x.cumprod(0)

    x = torch.linspace(-2, 2, 16, device=device)
    before = len(graph_compiler.reports())
    got = torch.compile(f)(x)
    torch.testing.assert_close(got.cpu(), f(x).cpu())
    report = _lowered_reports(before)[0][2]
    assert report.eager >= 1 and report.lowered >= 1, str(report)


def test_a_new_shape_recompiles(device):
    _fresh()
    f = torch.compile(lambda a: torch.tanh(a) * 2)
    before = len(graph_compiler.reports())
    for n in (4, 9):
        x = torch.randn(n, device=device)
        torch.testing.assert_close(f(x).cpu(), (torch.tanh(x) * 2).cpu())
    assert len(_lowered_reports(before)) == 2


def test_backend_named_after_the_device(device_type, device):
    _fresh()
    x = torch.randn(5, 5, device=device)
    before = len(graph_compiler.reports())
    got = torch.compile(lambda a: a @ a.t() + 1, backend=device_type)(x)
    torch.testing.assert_close(got.cpu(), (x @ x.t() + 1).cpu(), rtol=1e-5, atol=1e-5)
    assert len(_lowered_reports(before)) == 1


def test_wrong_arguments_to_a_program_are_refused(device):
    """The HAL checks a StableHLO program's tensors: a shape mismatch names the argument."""
    text = textwrap.dedent("""
        module @m {
          func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {
            %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
            return %0 : tensor<4xf32>
          }
        }
    """)
    prog = torch_hal.programs.Program(text.encode(), "stablehlo", device=device.index)
    k = prog.kernel("main")
    assert k.signature == [("tensor", 16), ("tensor", 16)]
    assert k.tensor_info == (1, 1, [("float32", (4,)), ("float32", (4,))], [-1])
    x = torch.arange(4.0, device=device)
    out = torch.full((4,), -1.0, device=device)
    with pytest.raises(RuntimeError, match=r"argument 0 \(parameter 0\).*f32\[5\].*f32\[4\]"):
        k(torch.zeros(5, device=device), out)
    k(x, out)
    torch.testing.assert_close(out.cpu(), torch.arange(4.0) * 2)


CACHE_CHILD = textwrap.dedent("""
    import time, torch, torch_hal
    from torch_hal import graph_compiler
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).to("neuron")
    x = torch.randn(4, 8, device="neuron")
    t = time.perf_counter()
    y = torch.compile(model)(x)
    y.sum().item()
    print("SECONDS", time.perf_counter() - t)
    print("LINES", len(open(__import__("os").environ["NEURONX_CC_STANDIN_LOG"]).readlines()))
""")


@pytest.mark.own_backend_trainium
def test_a_second_process_hits_the_compile_cache(tmp_path):
    """With a Neuron compiler (a stand-in that records its command line and writes the module
    as the NEFF, executed by the emulator), the second process finds every NEFF in the cache."""
    standin = os.path.join(os.path.dirname(__file__), "..", "..", "hal_backends", "trainium",
                           "tests", "neuronx_cc_standin.sh")
    if not os.path.exists(standin):
        pytest.fail(f"the neuronx-cc stand-in is missing: {standin}")
    log = tmp_path / "commands.txt"
    env = dict(os.environ, TORCH_HAL_BACKEND="trainium", NEURON_CC=os.path.abspath(standin),
               NEURONX_CC_STANDIN_LOG=str(log), NEURON_COMPILE_CACHE_URL=str(tmp_path / "cache"),
               NEURON_EMU_LOCK_DIR=str(tmp_path / "neuron-emu"))
    lines = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CACHE_CHILD], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        lines.append(int(r.stdout.split("LINES")[1].split()[0]))
    assert lines[0] >= 1 and lines[1] == lines[0], lines


WARM_CHILD = textwrap.dedent("""
    import sys, torch, torch_hal
    from torch_hal import graph_compiler
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8),
                                torch.nn.GELU()).to("neuron")
    x = torch.randn(4, 8, device="neuron", requires_grad=True)
    y = torch.compile(model)(x)
    y.square().sum().backward()
    print("VALUES", y.sum().item(), x.grad.sum().item())
    print("TORCH_MLIR", "torch_mlir" in sys.modules)
""")


@pytest.mark.own_backend_trainium
def test_a_second_process_reads_lowerings_and_executables_back(tmp_path):
    """On the emulator (no Neuron compiler): the second process lowers nothing (torch-mlir is
    not even imported) and compiles nothing (the executor's cache gains no entry), and computes
    the same values."""
    env = dict(os.environ, TORCH_HAL_BACKEND="trainium",
               TORCH_HAL_STABLEHLO_CACHE=str(tmp_path / "stablehlo"),
               NEURON_EMU_XLA_CACHE=str(tmp_path / "xla"),
               NEURON_EMU_LOCK_DIR=str(tmp_path / "neuron-emu"))
    env.pop("NEURON_CC", None)
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", WARM_CHILD], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
        runs.append((lines["VALUES"], lines["TORCH_MLIR"],
                     sorted(p.name for p in (tmp_path / "xla").rglob("*.xla"))))
    (values, first_imported, first_entries), (again, second_imported, second_entries) = runs
    assert first_imported == "True" and second_imported == "False"
    assert first_entries and second_entries == first_entries
    assert again == values


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class LlamaBlock(torch.nn.Module):
    """RMSNorm, causal SDPA, SiLU-gated MLP, residuals."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.up = torch.nn.Linear(d, 2 * d, bias=False)
        self.gate = torch.nn.Linear(d, 2 * d, bias=False)
        self.down = torch.nn.Linear(2 * d, d, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.qkv(self.n1(x)).split(C, -1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids).logits


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128, n_positions=32,
                     attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0,
                     eos_token_id=0)
    return _Logits(GPT2LMHeadModel(cfg))


@pytest.mark.parametrize("name", ["llama_block_bf16", "gpt2"])
def test_models_lower_and_train_as_eager(device, name):
    """A Llama-style block under bf16 autocast and a transformers GPT-2: at least 95% of the aten
    nodes of the forward and backward graphs run as device programs, and three optimizer steps
    give eager's losses (bf16: within bf16 rounding)."""
    _fresh()
    torch.manual_seed(0)
    if name == "gpt2":
        make, x, autocast = _gpt2, torch.randint(0, 128, (2, 16)), False
    else:
        make, x, autocast = LlamaBlock, torch.randn(2, 16, 64), True
    eager, compiled = make().to(device), make().to(device)
    compiled.load_state_dict(eager.state_dict())
    x = x.to(device)
    before = len(graph_compiler.reports())
    losses = []
    for model, fn in ((eager, eager), (compiled, torch.compile(compiled))):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        run = []
        for _ in range(3):
            opt.zero_grad()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = fn(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            run.append(loss.item())
        losses.append(run)
    tol = dict(rtol=2e-2, atol=1e-3) if autocast else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(losses[1], losses[0], **tol)
    reports = [r for _, _, r in _lowered_reports(before)]
    lowered, total = sum(r.lowered for r in reports), sum(r.total for r in reports)
    assert {k for _, k, _ in _lowered_reports(before)} == {"forward", "backward"}
    assert lowered / total >= 0.95, [str(r) for r in reports]


def _forty_steps(name, base, data, device, compiled, autocast):
    _fresh()
    model = copy.deepcopy(base).to(device)
    fn = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for x in data:
        x = x.to(device)
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            y = fn(x).float()
            loss = (F.cross_entropy(y.flatten(0, 1), x.flatten()) if name == "gpt2"
                    else y.pow(2).mean())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("name", ["llama_block_bf16", "gpt2"])
def test_forty_steps_stay_within_twice_cpu_inductors_deviation(device, name):
    """40 AdamW steps of a transformers GPT-2 and of a Llama-style block under bf16 autocast,
    compiled on the device: the losses' largest relative deviation from CPU eager is at most
    twice CPU Inductor's own (compiled on the CPU, same weights and batches, same run)."""
    torch.manual_seed(0)
    if name == "gpt2":
        base, autocast = _gpt2(), False
        data = [torch.randint(0, 128, (4, 16)) for _ in range(40)]
    else:
        base, autocast = LlamaBlock(), True
        data = [torch.randn(4, 16, 64) for _ in range(40)]
    cpu = torch.device("cpu")
    eager = _forty_steps(name, base, data, cpu, False, autocast)
    runs = {"cpu inductor": _forty_steps(name, base, data, cpu, True, autocast),
            "device": _forty_steps(name, base, data, device, True, autocast)}
    deviation = {k: max(abs(a - e) / abs(e) for a, e in zip(v, eager)) for k, v in runs.items()}
    print(f"{name}: largest relative deviation from cpu eager over 40 steps: {deviation}")
    assert eager[-1] < eager[0]  # it trains
    assert deviation["device"] <= 2 * deviation["cpu inductor"], deviation


def test_a_missing_package_warns_once_and_goes_to_inductor(device_type, device, monkeypatch):
    """Without torch-mlir (or jax) the device is one without a code generator, as before: one
    warning names the package, then Inductor has the graph (with the patch series, 0018, an
    error names the device and the ways out; torch without it stops with KeyError)."""
    import torch._inductor.compile_fx as compile_fx

    from torch_hal import stablehlo

    _fresh()
    graph_compiler._warned.clear()
    why = "torch-mlir is not installed (pip install torch-mlir==20261001)"
    monkeypatch.setattr(stablehlo, "is_available", lambda: (False, why))
    x = torch.randn(4, device=device)
    with pytest.warns(RuntimeWarning, match=r"torch-mlir is not installed"):
        if hasattr(compile_fx, "_run_captured_graph"):  # patch 0018
            with pytest.raises(Exception, match="run_eagerly_without_codegen"):
                torch.compile(lambda a: a * 2 + 1)(x)
        else:
            with pytest.raises(Exception, match=f"KeyError: '{device_type}'"):
                torch.compile(lambda a: a * 2 + 1)(x)
    _fresh()
