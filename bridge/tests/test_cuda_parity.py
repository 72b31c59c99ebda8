"""What a CUDA user calls works on the device, or fails the way it fails on CUDA.

Each test here is a gap found by running scripts written for CUDA, and PyTorch's own tests for
out-of-tree backends, with only the device string changed: streams without an index, device
capabilities, the fused RNN cells, attention taking the CPU's kernel, autocast's banned ops,
the legacy profiler, quantized tensors, forked children and the emulator warning.
"""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import torch_hal


# ---- Streams and capabilities -------------------------------------------------------------------

@pytest.mark.parametrize("form", ["positional", "keyword"])
def test_stream_without_index_is_on_current_device(device_type, devmod, form):
    stream = torch.Stream(device_type) if form == "positional" else torch.Stream(device=device_type)
    assert stream.device == torch.device(device_type, devmod.current_device())
    event = torch.Event(device_type, enable_timing=True)
    event.record(stream)
    event.synchronize()
    assert event.query()


def test_stream_without_index_follows_set_device(device_type, devmod):
    if devmod.device_count() < 2:
        pytest.skip("needs a second device")  # the single-device case is covered above
    with devmod.device(1):
        assert torch.Stream(device_type).device_index == 1


def test_device_capability_lists_dtypes(device_type):
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                  torch.bool, torch.complex64, torch.uint8):
        assert dtype in dtypes
    assert torch.qint8 not in dtypes and torch.quint8 not in dtypes  # refused, see below
    assert torch.accelerator.get_device_capability(f"{device_type}:0") == {
        "supported_dtypes": dtypes}


# ---- Quantized tensors: refused at creation ---------------------------------------------------

def test_quantized_tensors_refused_at_creation(device_type, backend):
    x = torch.randn(4, device=device_type)
    message = f"backend '{backend}'.*quantized tensors are not supported on {device_type}"
    with pytest.raises(NotImplementedError, match=message):
        torch.quantize_per_tensor(x, 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match=message):
        torch.quantize_per_channel(x.view(2, 2), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]),
                                   0, torch.quint8)
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match=message):
        q.to(device_type)
    assert torch.equal(x.cpu(), x.cpu())  # the device is still usable


# ---- The fused RNN cells ----------------------------------------------------------------------

def _match_cpu(make_module, inputs, device_type):
    """Runs a module on the CPU and on the device from the same weights and inputs; returns the
    largest difference of the outputs and of every gradient."""
    torch.manual_seed(0)
    cpu = make_module()
    dev = make_module().to(device_type)
    dev.load_state_dict(cpu.state_dict())
    cpu_in = [t.clone().requires_grad_() for t in inputs]
    dev_in = [t.to(device_type).requires_grad_() for t in inputs]

    def flat(out):
        if isinstance(out, torch.Tensor):
            return [out]
        return [t for o in out for t in flat(o)]

    cpu_out, dev_out = flat(cpu(*cpu_in)), flat(dev(*dev_in))
    weights = [torch.randn_like(o) for o in cpu_out]
    sum(((o * w).sum() for o, w in zip(cpu_out, weights))).backward()
    sum(((o * w.to(device_type)).sum() for o, w in zip(dev_out, weights))).backward()
    pairs = list(zip(cpu_out, dev_out)) + [(a.grad, b.grad) for a, b in zip(cpu_in, dev_in)]
    pairs += [(p.grad, q.grad) for p, q in zip(cpu.parameters(), dev.parameters())]
    for a, b in pairs:
        assert b.device.type == device_type and a.shape == b.shape and a.dtype == b.dtype
    return max((a - b.cpu()).abs().max().item() for a, b in pairs)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layers_match_cpu(device_type, kind, bias):
    layer = getattr(torch.nn, kind)
    x = torch.randn(3, 5, 4)
    h0 = torch.randn(2, 3, 6)
    state = (h0, torch.randn(2, 3, 6)) if kind == "LSTM" else h0

    class WithState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = layer(4, 6, num_layers=2, bias=bias, batch_first=True)

        def forward(self, x, *state):
            return self.rnn(x, tuple(state) if kind == "LSTM" else state[0])

    inputs = [x, *state] if kind == "LSTM" else [x, state]
    # The device's cells add the two gate products, then the biases (CUDA's order); the CPU
    # adds each bias to its product first: the results differ in the last bits only.
    assert _match_cpu(WithState, inputs, device_type) < 1e-5


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_recurrent_cells_match_cpu(device_type, kind):
    cell = getattr(torch.nn, kind)
    x, h = torch.randn(3, 4), torch.randn(3, 6)
    if kind == "LSTMCell":
        class Cell(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.cell = cell(4, 6)

            def forward(self, x, h, c):
                return self.cell(x, (h, c))

        assert _match_cpu(Cell, [x, h, torch.randn(3, 6)], device_type) < 1e-5
    else:
        assert _match_cpu(lambda: cell(4, 6), [x, h], device_type) < 1e-5
    # Unbatched input and no state, as PyTorch's own module tests call them.
    out = cell(4, 6).to(device_type)(torch.randn(4, device=device_type))
    first = out[0] if isinstance(out, tuple) else out
    assert first.shape == (6,) and first.device.type == device_type


def test_recurrent_cell_double_backward(device_type):
    # With create_graph, autograd differentiates the cell's formula (PyTorch's composite), so
    # second derivatives work as on CUDA.
    cell = torch.nn.GRUCell(3, 4).to(device_type).double()
    x = torch.randn(2, 3, device=device_type, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(cell(x).pow(2).sum(), x, create_graph=True)
    grad.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad.cpu()).all()


def test_fused_cell_errors_name_the_shapes(device_type):
    gates = torch.randn(2, 8, device=device_type)
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell: expected gates of shape"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(2, 3, device=device_type))


# ---- Attention --------------------------------------------------------------------------------

def _op_names(device_type, fn):
    with torch.autograd.profiler.profile() as prof:
        fn()
    return {e.name for e in prof.function_events}


@pytest.mark.parametrize("case", ["plain", "causal", "mask", "mask_grad", "float64", "gqa"])
def test_sdpa_is_bit_exact_with_cpu(device_type, case):
    torch.manual_seed(0)
    heads_kv = 1 if case == "gqa" else 3
    dtype = torch.float64 if case == "float64" else torch.float32
    q = torch.randn(2, 3, 7, 16, dtype=dtype, requires_grad=True)
    k = torch.randn(2, heads_kv, 9, 16, dtype=dtype, requires_grad=True)
    v = torch.randn(2, heads_kv, 9, 16, dtype=dtype, requires_grad=True)
    kwargs = {"is_causal": case == "causal", "enable_gqa": case == "gqa"}
    if case.startswith("mask"):
        kwargs["attn_mask"] = torch.randn(7, 9, dtype=dtype)
    dev_kwargs = {key: (val.to(device_type) if isinstance(val, torch.Tensor) else val)
                  for key, val in kwargs.items()}
    if case == "mask_grad":  # a mask that needs a gradient takes the math path on the CPU
        kwargs["attn_mask"].requires_grad_()
        dev_kwargs["attn_mask"].requires_grad_()
    grad = torch.randn(2, 3, 7, 16, dtype=dtype)

    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    out.backward(grad)
    dq, dk, dv = (t.detach().to(device_type).requires_grad_() for t in (q, k, v))
    dev_out = F.scaled_dot_product_attention(dq, dk, dv, **dev_kwargs)
    dev_out.backward(grad.to(device_type))
    assert torch.equal(out, dev_out.cpu())
    pairs = [(q, dq), (k, dk), (v, dv)]
    if case == "mask_grad":
        pairs.append((kwargs["attn_mask"], dev_kwargs["attn_mask"]))
    for cpu_t, dev_t in pairs:
        assert torch.equal(cpu_t.grad, dev_t.grad.cpu())


def test_sdpa_takes_the_overrideable_route(device_type):
    q = torch.randn(1, 2, 4, 8, device=device_type)
    # Where the CPU takes its flash kernel, the device answers "overrideable"...
    assert torch._fused_sdp_choice(q.cpu(), q.cpu(), q.cpu()) == SDPBackend.FLASH_ATTENTION.value
    assert torch._fused_sdp_choice(q, q, q) == SDPBackend.OVERRIDEABLE.value
    names = _op_names(device_type, lambda: F.scaled_dot_product_attention(q, q, q))
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in names
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names  # ...and runs it
    # Where the CPU takes the math path (dropout with grad), so does the device.
    qg = q.clone().requires_grad_()
    assert torch._fused_sdp_choice(qg, qg, qg, dropout_p=0.5) == SDPBackend.MATH.value
    names = _op_names(device_type,
                      lambda: F.scaled_dot_product_attention(qg, qg, qg, dropout_p=0.5))
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in names


def test_multihead_attention_matches_cpu(device_type):
    torch.manual_seed(0)
    cpu = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    dev = torch.nn.MultiheadAttention(16, 4, batch_first=True).to(device_type)
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(2, 5, 16)
    out, _ = cpu(x, x, x, need_weights=False)
    dev_out, _ = dev(*(x.to(device_type),) * 3, need_weights=False)
    assert torch.equal(out, dev_out.cpu())


# ---- Autocast ---------------------------------------------------------------------------------

def test_autocast_bans_binary_cross_entropy(device_type):
    p, t = torch.rand(4, device=device_type), torch.rand(4, device=device_type)
    with torch.autocast(device_type, torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, t)
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.BCELoss()(p, t)
        # The fused form is the safe one, and runs in float32 as on CUDA.
        assert F.binary_cross_entropy_with_logits(p, t).dtype == torch.float32
    assert F.binary_cross_entropy(p, t).dtype == torch.float32  # outside autocast: allowed


# ---- The legacy profiler ----------------------------------------------------------------------

def test_legacy_profiler_with_use_device(device_type, recwarn):
    from torch.autograd.profiler import profile

    x = torch.randn(128, 128, device=device_type)
    with profile(use_device=device_type) as prof:
        y = x @ x
        torch.accelerator.synchronize()
    assert torch.isfinite(y.cpu()).all()
    events = {e.name: e for e in prof.function_events}
    assert "aten::mm" in events
    for event in prof.function_events:
        assert event.device_time_total >= 0, event
    assert events["aten::mm"].device_time_total > 0
    table = prof.key_averages().table(sort_by="self_cpu_time_total")
    assert device_type.upper() in table  # the device's time columns
    profiler_errors = [w for w in recwarn if "RecordFunction callback" in str(w.message)]
    assert not profiler_errors


# ---- Forked children --------------------------------------------------------------------------

def test_forked_child_cannot_use_the_device(device_type):
    torch.ones(1, device=device_type)  # the parent has initialized the device
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened and leave without running any cleanup
        os.close(read_end)
        try:
            torch.ones(1, device=device_type)
            message = "no error"
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            message = f"{type(exc).__name__}: {exc}"
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    assert message.startswith(f"RuntimeError: Cannot re-initialize {device_type} in forked "
                              "subprocess"), message
    assert "'spawn' start method" in message
    assert torch.ones(1, device=device_type).item() == 1  # the parent is unaffected


# ---- The emulator warning ---------------------------------------------------------------------

_COUNT_WARNINGS = textwrap.dedent("""
    import warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import torch
        torch.ones(1, device="neuron") + 1
    print(sum("libnrt emulator" in str(w.message) for w in caught))
""")


@pytest.mark.own_backend
@pytest.mark.parametrize("chosen_by_path", [False, True])
def test_bundled_emulator_warns_once(tmp_path, chosen_by_path):
    """It starts its own Trainium process, whatever the run's backend."""
    env = {key: val for key, val in os.environ.items()
           if not key.startswith(("HAL_NEURON", "NEURON_EMU"))}
    env.update(TORCH_HAL_BACKEND="trainium", NEURON_EMU_LOCK_DIR=str(tmp_path))
    if chosen_by_path:
        lib_dir = os.path.join(os.path.dirname(torch_hal.__file__), "lib")
        env["HAL_NEURON_LIBNRT"] = os.path.join(lib_dir, "libnrt.so.1")
    if os.path.exists("/opt/aws/neuron/lib/libnrt.so.1"):
        pytest.skip("a Neuron runtime is installed: the emulator is not the fallback here")
    proc = subprocess.run([sys.executable, "-c", _COUNT_WARNINGS], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("0" if chosen_by_path else "1"), proc.stderr
