"""0012: activation checkpointing replays the device RNG state of any device module that reports
``is_initialized()``, not only of modules that carry CUDA's private ``_initialized`` flag.

torch_hal's device module keeps a copy of that private flag, so that unpatched torch works with
it. The tests hide the flag (the module then offers the public ``is_initialized()`` only, the
function torch.cuda, torch.xpu and torch.mtia have), which is what torch.utils.checkpoint sees
with the module of a PrivateUse1 backend that implements the public functions only.
"""

import types

import pytest
import torch
import torch.utils.checkpoint as cp


class _PublicOnly(types.ModuleType):
    """A device module without the private ``_initialized``; every other name is forwarded."""

    def __init__(self, module):
        super().__init__(module.__name__)
        self.__dict__["_wrapped"] = module

    def __getattr__(self, name):
        if name == "_initialized":
            raise AttributeError(name)
        return getattr(self.__dict__["_wrapped"], name)


@pytest.fixture
def public_device_module(dev, monkeypatch):
    real = getattr(torch, dev)
    torch.randn(1, device=dev)  # the device is initialized before the checkpointed forward
    assert real.is_initialized()
    monkeypatch.setattr(torch, dev, _PublicOnly(real))
    assert not hasattr(getattr(torch, dev), "_initialized")
    return real


def _dropout_block(x):
    return torch.nn.functional.dropout(x, p=0.5, training=True).tanh() * 3


@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpointed_dropout_recomputes_the_same_mask(dev, public_device_module, use_reentrant):
    x = torch.randn(64, 64, device=dev, requires_grad=True)

    torch.manual_seed(11)
    _dropout_block(x).sum().backward()
    expected = x.grad.clone()
    x.grad = None

    torch.manual_seed(11)
    out = cp.checkpoint(_dropout_block, x, use_reentrant=use_reentrant)
    out.sum().backward()
    # same dropout mask in the forward and in the recomputation: same gradient as without
    # checkpointing
    torch.testing.assert_close(x.grad, expected)


def test_device_module_without_is_initialized_is_not_stashed(dev, monkeypatch):
    # a module with neither spelling (as torch.mps) is treated as not initialized, as before
    real = getattr(torch, dev)
    bare = types.SimpleNamespace(**{n: getattr(real, n) for n in
                                    ("device", "get_rng_state", "set_rng_state", "device_count")})
    monkeypatch.setattr(cp, "_get_device_module", lambda device=None: bare)
    x = torch.randn(8, device=dev, requires_grad=True)
    cp.checkpoint(_dropout_block, x, use_reentrant=True).sum().backward()
    assert x.grad is not None
