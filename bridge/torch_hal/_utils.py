"""Device-index helpers shared by the torch.<device> module (and used by torch.serialization)."""

import torch

from . import _C


def _device_type():
    return _C._device_type_name()


def _get_device_index(device=None, optional=False, allow_cpu=False):
    """Returns the device index of ``device`` (int, str, torch.device or None).

    None (or a device without an index) means the current device when ``optional`` is true.
    """
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != _device_type():
            raise ValueError(f"Expected a {_device_type()} device, but got: {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError(f"Expected a {_device_type()} device with a specified index or an integer, "
                             f"but got: {device}")
        return _C._get_device()
    if not isinstance(device, int):
        raise ValueError(f"Expected a device, device index or None, but got {device!r}")
    return device


def _device(index):
    return torch.device(_device_type(), index)
