"""0020: MultiheadAttention and TransformerEncoderLayer leave their fused fast path under the
autocast of the inputs' device, not only under CUDA's: inference under
``torch.autocast("<device>", torch.bfloat16)`` computes what the slow path (and CUDA) computes:
attention returns bfloat16, not float32. TorchScript still scripts the modules (it knows only
the no-argument form of is_autocast_enabled).
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


@pytest.mark.parametrize("name", ["mha", "encoder"])
def test_modules_still_script(dev, name):
    """TorchScript knows only the no-argument is_autocast_enabled(): the patched modules must
    script as the unpatched ones do, and compute what they compute eagerly."""
    torch.manual_seed(0)
    if name == "mha":
        module = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    else:
        layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.0,
                                                 batch_first=True)
        module = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        module = module.eval()
    scripted = torch.jit.script(module)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        if name == "mha":
            want, got = module(x, x, x)[0], scripted(x, x, x)[0]
        else:
            want, got = module(x), scripted(x)
    torch.testing.assert_close(got, want)
