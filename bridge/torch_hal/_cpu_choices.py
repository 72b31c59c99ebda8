"""The CPU's implementation choices for the device, where torch makes them by device type in Python.

Every operator on the device runs PyTorch's CPU kernel, so the device computes what the CPU
computes bit for bit only if it also takes the CPU's paths. In torch 2.13 the optimizers pick
their default implementation by device type: ``_default_to_fused_or_foreach``
(torch/optim/optimizer.py) takes the multi-tensor ("foreach") one for every device type in
``_get_foreach_kernels_supported_devices()``, a list that always names the PrivateUse1 device,
and the per-tensor loop for CPU tensors. The two round differently in ASGD, NAdam and RAdam
(after five steps up to 7e-7 apart on the CPU alone), and ``AveragedModel``
(torch/optim/swa_utils.py) averages with ``_foreach_lerp_`` on those devices and with add/div
on the CPU. Here, with no foreach kernels of its own, the device takes the loop as the CPU
does; ``foreach=True`` still selects the multi-tensor path, which runs the CPU's foreach
kernels.

``torch.nn.utils.clip_grad_norm_`` and friends take foreach on the CPU too
(``_device_has_foreach_support`` adds "cpu"), so ``torch.utils._foreach_utils`` itself is left
as it is: only the modules that copied the function in for the optimizers' default are changed.
"""

import functools

__all__ = ["install"]

_MODULES = ("torch.optim.optimizer", "torch.optim.swa_utils")


def _without(device_type, supported):
    @functools.wraps(supported)
    def foreach_kernels_supported_devices():
        return [name for name in supported() if name != device_type]

    foreach_kernels_supported_devices.__torch_hal_original__ = supported
    return foreach_kernels_supported_devices


def install(device_type):
    """Makes the optimizers' default for ``device_type`` tensors the CPU's (idempotent).

    A torch whose modules no longer have the function is left as it is (the device works; only
    this choice would differ)."""
    import importlib

    for name in _MODULES:
        module = importlib.import_module(name)
        current = getattr(module, "_get_foreach_kernels_supported_devices", None)
        if current is None:
            continue
        original = getattr(current, "__torch_hal_original__", current)
        module._get_foreach_kernels_supported_devices = _without(device_type, original)
