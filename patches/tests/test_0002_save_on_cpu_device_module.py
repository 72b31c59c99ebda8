"""0002: save_on_cpu(pin_memory=True) pins for the current accelerator, not for CUDA."""

import pytest
import torch


def test_pack_hook_pins_saved_tensors(dev):
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True)
    device, packed = hooks.pack_hook(torch.randn(32, device=dev))
    assert device.type == dev
    assert packed.device.type == "cpu"
    assert packed.is_pinned()


def test_offloaded_backward_matches(dev):
    x = torch.randn(16, 16, device=dev, requires_grad=True)
    w = torch.randn(16, 16, device=dev, requires_grad=True)

    def f():
        return (x @ w).tanh().sum()

    f().backward()
    expected = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    with torch.autograd.graph.save_on_cpu(pin_memory=True):
        y = f()
    y.backward()
    torch.testing.assert_close((x.grad, w.grad), expected)


def test_unknown_device_type_is_an_error():
    with pytest.raises(RuntimeError):
        torch.autograd.graph.save_on_cpu(pin_memory=True, device_type="no_such_device")
