"""Fake (meta) kernels against the device's real outputs, for every operator the bridge implements.

torch.compile plans memory from the fake kernels and checks the real outputs against them
(assert_size_stride in Inductor's wrapper), so a real kernel whose sizes, strides, storage offset
or dtype differ from its fake kernel's stops a compiled model. The operators the bridge
implements itself or overrides (bridge/csrc/aten: attention, convolution, the RNN cells, views,
fills, resize) run here under PyTorch's own cross-reference mode (FakeTensor CrossRefFakeMode,
strides and aliasing checked), forward and backward, on the OpInfo database's samples of the
entries that reach them, in every dtype the CPU takes for the entry (every sample in float32 and
bfloat16, the first three in the others: the layouts do not depend on the dtype); the fused
operators with no OpInfo entry of their own (SDPA's overrideable kernels in the query layouts
models use, the fused LSTM and GRU cells) are called under the same mode.

Every other operator runs the CPU kernel through the fallback, whose outputs keep the CPU
output's sizes and strides (test_opinfo.py compares values).
"""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_utils import CrossRefFakeMode
from torch.utils._pytree import tree_flatten, tree_map_only

from torch.testing._internal.common_methods_invocations import op_db

aten = torch.ops.aten

# The code checked is the bridge's, the same on every backend: run once (conftest.py).
pytestmark = pytest.mark.backend_neutral

# The OpInfo entries whose samples reach an operator the bridge registers for the device.
BRIDGE_ENTRIES = [
    "nn.functional.scaled_dot_product_attention",  # _fused_sdp_choice, *_overrideable(_backward)
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d",  # convolution_*
    "nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
    "view", "view_as", "unfold", "as_strided", "view_as_real", "view_as_complex",
    "fill", "zero_", "resize_", "empty_strided",
]


# Every sample in the dtypes models train in; the first few in the others.
FULL_SAMPLE_DTYPES = (torch.float32, torch.bfloat16)
OTHER_DTYPE_SAMPLES = 3


def _entries():
    params = []
    for op in op_db:
        if op.name not in BRIDGE_ENTRIES:
            continue
        name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        for dtype in sorted(op.supported_dtypes("cpu"), key=str):
            params.append(pytest.param(op, dtype, id=f"{name}-{str(dtype).split('.')[-1]}"))
    return params


def _to(device, tree):
    """The tensors of a sample on the device with their storage, sizes, strides and offset (a
    sample may be a partial view of a larger storage), requires_grad kept."""
    def move(t):
        storage = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype)
        storage.as_strided(t.size(), t.stride(), t.storage_offset()).copy_(t.detach())
        moved = storage.to(device).as_strided(t.size(), t.stride(), t.storage_offset())
        return moved.detach().requires_grad_(t.requires_grad)

    return tree_map_only(torch.Tensor, move, tree)


def _backward(result):
    outs = [t for t in tree_flatten(result)[0]
            if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None]
    if outs:
        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])


@pytest.mark.usefixtures("opinfo_samples_without_caller_lookup")
@pytest.mark.parametrize("op,dtype", _entries())
def test_opinfo_entry_fake_matches_real(op, dtype, device):
    """Every sample of the entry, forward and (where differentiable) backward, under crossref."""
    differentiable = op.supports_autograd and dtype in op.supported_backward_dtypes("cpu")
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=differentiable))
    assert samples, f"{op.name}: no samples for {dtype}"
    if dtype not in FULL_SAMPLE_DTYPES:  # the layouts do not depend on the dtype: a few suffice
        samples = samples[:OTHER_DTYPE_SAMPLES]
    for sample in samples:
        inp, args, kwargs = _to(device, (sample.input, sample.args, sample.kwargs))
        with CrossRefFakeMode(check_strides=True, check_aliasing=True):
            result = op(inp, *args, **kwargs)
            if differentiable:
                _backward(result)


def _sdpa_inputs(device, dtype, layout, heads_kv=4):
    """q, k, v of [2, 4, 8, 16] in the layout models give them: "contiguous" ([B, H, S, D]),
    "bshd" (projected as [B, S, H, D] and transposed, as transformers models do) or "fused"
    (q, k, v slices of one [B, S, 3, H, D] projection)."""
    torch.manual_seed(0)
    B, H, S, D = 2, 4, 8, 16
    if layout == "contiguous":
        q = torch.randn(B, H, S, D, dtype=dtype)
        k = torch.randn(B, heads_kv, S, D, dtype=dtype)
        v = torch.randn(B, heads_kv, S, D, dtype=dtype)
    elif layout == "bshd":
        q = torch.randn(B, S, H, D, dtype=dtype).transpose(1, 2)
        k = torch.randn(B, S, heads_kv, D, dtype=dtype).transpose(1, 2)
        v = torch.randn(B, S, heads_kv, D, dtype=dtype).transpose(1, 2)
    else:
        qkv = torch.randn(B, S, 3, H, D, dtype=dtype)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    return [t.to(device).requires_grad_() for t in (q, k, v)]


SDPA_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


@pytest.mark.parametrize("layout", ["contiguous", "bshd", "fused"])
@pytest.mark.parametrize("dtype", SDPA_DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("variant", ["causal", "mask", "gqa", "scale"])
def test_sdpa_overrideable_fake_matches_real(device, dtype, layout, variant):
    """The overrideable kernels (forward and backward) called as the SDPA dispatcher calls them,
    and through F.scaled_dot_product_attention, under crossref."""
    q, k, v = _sdpa_inputs(device, dtype, layout, heads_kv=2 if variant == "gqa" else 4)
    mask = None
    if variant == "mask":
        mask = torch.randn(2, 1, 8, 8, dtype=dtype).to(device)
    kwargs = dict(is_causal=variant == "causal", attn_mask=mask,
                  scale=0.3 if variant == "scale" else None, enable_gqa=variant == "gqa")

    def via_functional():
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        out.backward(torch.ones_like(out))

    with CrossRefFakeMode(check_strides=True, check_aliasing=True):
        via_functional()
    if variant == "gqa":
        return  # the overrideable kernel itself takes no GQA flag (the dispatcher expands k, v)

    def direct():
        out = aten._scaled_dot_product_fused_attention_overrideable(
            q.detach(), k.detach(), v.detach(), mask, 0.0, variant == "causal", False,
            scale=kwargs["scale"])
        if mask is None:
            # Autograd passes the backward an undefined mask, which a Python call cannot; the
            # backward without a mask is checked through F.scaled_dot_product_attention above.
            return
        aten._scaled_dot_product_fused_attention_overrideable_backward(
            torch.ones_like(out[0]), q.detach(), k.detach(), v.detach(), mask,
            [True, True, True, True], out[0], out[1], out[2], out[3], out[4], out[5], 0.0,
            False, out[6], out[7], scale=kwargs["scale"])

    with CrossRefFakeMode(check_strides=True, check_aliasing=True):
        direct()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16],
                         ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_rnn_cells_fake_match_real(device, dtype, cell):
    """nn.LSTMCell / nn.GRUCell and nn.LSTM / nn.GRU on the device reach the bridge's fused
    cells: their outputs and gradients under crossref."""
    torch.manual_seed(0)
    if cell == "lstm":
        cell_mod, seq_mod = torch.nn.LSTMCell(6, 5), torch.nn.LSTM(6, 5, num_layers=2)
    else:
        cell_mod, seq_mod = torch.nn.GRUCell(6, 5), torch.nn.GRU(6, 5, num_layers=2)
    cell_mod = cell_mod.to(device=device, dtype=dtype)
    seq_mod = seq_mod.to(device=device, dtype=dtype)
    x = torch.randn(3, 6, dtype=dtype).to(device).requires_grad_()
    xs = torch.randn(4, 3, 6, dtype=dtype).to(device).requires_grad_()

    def run():
        out = cell_mod(x)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
        seq_out, _ = seq_mod(xs)
        seq_out.sum().backward()

    with CrossRefFakeMode(check_strides=True, check_aliasing=True):
        run()
