"""0013: torch.utils.checkpoint's default device type is the current accelerator, also after
DefaultDeviceType.set_device_type() is called without an argument."""

import pytest
import torch
import torch.utils.checkpoint as cp
from torch.utils.checkpoint import DefaultDeviceType


@pytest.fixture
def restore_default_device_type():
    saved = DefaultDeviceType._default_device_type
    yield
    DefaultDeviceType._default_device_type = saved


def test_reset_restores_the_accelerator(dev, restore_default_device_type):
    assert DefaultDeviceType.get_device_type() == dev
    DefaultDeviceType.set_device_type("cpu")
    assert DefaultDeviceType.get_device_type() == "cpu"
    DefaultDeviceType.set_device_type()  # back to the default
    assert DefaultDeviceType.get_device_type() == dev


def test_private_helpers_default_to_the_default_device_type(dev, restore_default_device_type):
    DefaultDeviceType.set_device_type()
    assert cp._get_device_module() is getattr(torch, dev)
    with torch.autocast(dev, dtype=torch.bfloat16):
        device_kwargs, _ = cp._get_autocast_kwargs()
    assert device_kwargs == {"enabled": True, "dtype": torch.bfloat16,
                             "cache_enabled": torch.is_autocast_cache_enabled()}


def test_checkpoint_of_cpu_inputs_recomputes_under_device_autocast(dev, restore_default_device_type):
    # The inputs are on the CPU, so checkpoint uses the default device type to know which
    # device's autocast state to restore when it recomputes the forward.
    DefaultDeviceType.set_device_type()
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16).to(dev)

    def block(x):
        return lin(x.to(dev)).relu()

    x = torch.randn(4, 16, requires_grad=True)
    with torch.autocast(dev, dtype=torch.bfloat16):
        y = cp.checkpoint(block, x, use_reentrant=False)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()  # the recomputation must run under the same autocast
    assert x.grad is not None and lin.weight.grad is not None
