"""torch.<device>: the torch.cuda-style module of the torch_hal device.

Registered with torch._register_device_module under the backend's device-type name, so with
TORCH_HAL_BACKEND=trainium this is torch.neuron, with the cpu backend torch.hal. Generic torch
code (torch.accelerator, serialization, autocast, torch.manual_seed, fork_rng) finds what it
needs here.
"""

import warnings

import torch

from . import _C
from . import _utils  # torch.serialization looks up torch.<device>._utils._get_device_index
from . import amp  # torch.<device>.amp
from . import memory  # torch.<device>.memory (_record_memory_history, _snapshot, ...)
from .memory import (
    empty_cache,
    hal_memory_stats,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
)
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import Event, Stream

_get_device_index = _utils._get_device_index

__all__ = [
    "is_available",
    "is_initialized",
    "init",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "device_of",
    "synchronize",
    "Stream",
    "Event",
    "StreamContext",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "get_device_name",
    "get_device_properties",
    "get_amp_supported_dtype",
    "is_bf16_supported",
    "amp",
    "empty_cache",
    "hal_memory_stats",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]

_initialized = False


def _lazy_init():
    """Called by torch before the first tensor is created on the device."""
    global _initialized
    # Checked first: a child forked after the parent initialized inherits _initialized.
    if _C._is_in_bad_fork():
        raise RuntimeError(
            f"Cannot re-initialize {_C._device_type_name()} in forked subprocess. To use "
            f"{_C._device_type_name()} with multiprocessing, you must use the 'spawn' start "
            "method")
    if _initialized:
        return
    _C._init()
    _initialized = True


def init():
    _lazy_init()


def is_initialized():
    return _initialized and not _C._is_in_bad_fork()


def _is_in_bad_fork():
    return _C._is_in_bad_fork()


def is_available():
    """True when the backend has at least one device. Never initialises anything."""
    return _C._device_count() > 0


def device_count():
    return _C._device_count()


def current_device():
    return _C._get_device()


def set_device(device):
    """Sets the current device of this thread (a negative index is a no-op)."""
    index = _get_device_index(device, optional=True)
    if index >= 0:
        _C._set_device(index)


class device:
    """Context manager that changes the current device (None or a negative index: no-op)."""

    def __init__(self, device):
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc):
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of a tensor current (no-op for other tensors)."""

    def __init__(self, obj):
        idx = obj.get_device() if obj.device.type == _C._device_type_name() else -1
        super().__init__(idx)


def synchronize(device=None):
    """Waits for all work on all streams of a device (default: the current one)."""
    _C._synchronize(_get_device_index(device, optional=True))


def current_stream(device=None):
    index = _get_device_index(device, optional=True)
    return Stream._wrap(torch.accelerator.current_stream(index))


def default_stream(device=None):
    index = _get_device_index(device, optional=True)
    # torch.Stream takes the device type as its enum value; take it from an existing stream.
    device_type = torch.accelerator.current_stream(index).device_type
    return Stream(stream_id=0, device_index=index, device_type=device_type)


def set_stream(stream):
    """Makes ``stream`` the current stream of its device (None: no-op)."""
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes ``stream`` current on its device (None: no-op).

    Like torch.cuda.StreamContext it also makes the stream's device current for the duration.
    """

    def __init__(self, stream):
        self.stream = stream
        self.prev_device = -1
        self.prev_stream = None

    def __enter__(self):
        if self.stream is None:
            return self.stream
        index = self.stream.device_index
        self.prev_device = _C._exchange_device(index)
        self.prev_stream = torch.accelerator.current_stream(index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        torch.accelerator.set_stream(self.prev_stream)
        if self.prev_device >= 0:
            _C._set_device(self.prev_device)
        return False


def stream(stream):
    """``with torch.<device>.stream(s):`` runs the block's work on ``s``."""
    return StreamContext(stream)


class _DeviceProperties:
    def __init__(self, props):
        self.__dict__.update(props)
        self.type = _C._device_type_name()
        self.backend = _C._backend_name()

    def __repr__(self):
        return (f"_DeviceProperties(name='{self.name}', vendor='{self.vendor}', "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, "
                f"host_addressable={self.host_addressable})")


def get_device_properties(device=None):
    return _DeviceProperties(_C._device_properties(_get_device_index(device, optional=True)))


def get_device_name(device=None):
    return get_device_properties(device).name


def get_amp_supported_dtype():
    """The dtypes torch.autocast accepts for this device (PrivateUse1 autocast asks for this)."""
    return amp.get_amp_supported_dtype()


def is_bf16_supported(including_emulation=True):
    """bfloat16 tensors work on every torch_hal device (kernels run through PyTorch's CPU ones)."""
    return True


# What Inductor asks a PrivateUse1 device module for (torch._inductor.codegen.common,
# init_backend_registration), answered lazily so that import torch does not load Inductor.
_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")
_inductor_warned = False


def __getattr__(name):
    global _inductor_warned
    if name in _INDUCTOR_HOOKS:
        from . import compiler

        try:
            classes = compiler.register()
        except Exception as exc:  # Inductor swallows the error it gets here: say it once
            if not _inductor_warned:
                _inductor_warned = True
                warnings.warn(f"torch_hal: torch.compile cannot generate code for the device: "
                              f"{exc}", RuntimeWarning, stacklevel=2)
            classes = None
        if classes is not None:
            return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
