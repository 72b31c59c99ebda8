"""Automatic mixed precision for the torch_hal device (torch.<device>.amp).

torch.autocast("<device>") works directly; these are the torch.cuda.amp-style helpers. The
lower-precision type defaults to bfloat16 (torch_hal sets it when it loads; PyTorch keeps the
setting per thread, so the helpers here pass it explicitly).
"""

import torch

from . import _C

__all__ = ["autocast", "GradScaler", "get_amp_supported_dtype", "is_autocast_enabled",
           "get_autocast_dtype"]


def get_amp_supported_dtype():
    """The dtypes torch.autocast accepts for this device."""
    return [torch.bfloat16, torch.float16]


class autocast(torch.amp.autocast_mode.autocast):
    """torch.autocast for this device; ``dtype`` defaults to bfloat16."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        super().__init__(_C._device_type_name(), enabled=enabled,
                         dtype=torch.bfloat16 if dtype is None else dtype,
                         cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler for this device (torch.amp.GradScaler() alone defaults to "cuda")."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__(_C._device_type_name(), init_scale=init_scale,
                         growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


def is_autocast_enabled():
    return torch.is_autocast_enabled(_C._device_type_name())


def get_autocast_dtype():
    return torch.get_autocast_dtype(_C._device_type_name())
