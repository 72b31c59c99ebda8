"""0020: MultiheadAttention and TransformerEncoderLayer leave their fused fast path under the
autocast of the inputs' device, not only under CUDA's: inference under
``torch.autocast("<device>", torch.bfloat16)`` computes what the slow path (and CUDA) computes:
attention returns bfloat16, not float32.
"""

import pytest
import torch


def _modules(dev):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
                                             batch_first=True)
    return {"mha": mha.to(dev).eval(), "layer": layer.to(dev).eval()}


def _run(name, module, x):
    if name == "mha":
        return module(x, x, x, need_weights=False)[0]
    return module(x)


@pytest.mark.parametrize("name", ["mha", "layer"])
def test_inference_under_device_autocast_returns_the_autocast_dtype(dev, name):
    module = _modules(dev)[name]
    x = torch.randn(2, 5, 16, device=dev)
    with torch.no_grad(), torch.autocast(dev, torch.bfloat16):
        fast_or_slow = _run(name, module, x)
    # The slow path is what training mode takes (dropout is 0, so the same function).
    module.train()
    with torch.no_grad(), torch.autocast(dev, torch.bfloat16):
        slow = _run(name, module, x)
    # Attention's output projection runs in bfloat16; the layer ends with a layer norm, which
    # autocast runs in float32 (after bfloat16 matmuls the fused kernel would not have done).
    assert slow.dtype == (torch.bfloat16 if name == "mha" else torch.float32)
    assert fast_or_slow.dtype == slow.dtype
    assert torch.equal(fast_or_slow, slow)  # the same path: the same bits


def test_without_autocast_the_fast_path_is_kept(dev):
    module = _modules(dev)["mha"]
    x = torch.randn(2, 5, 16, device=dev)
    with torch.no_grad(), torch.autograd.profiler.profile() as prof:
        module(x, x, x, need_weights=False)
    assert "aten::_native_multi_head_attention" in {e.name for e in prof.function_events}
