"""Memory statistics and cache control of the torch_hal device.

The device allocator is the HAL's caching allocator (one per device) registered as a
c10::DeviceAllocator, so these are thin wrappers over torch.accelerator.memory that accept the
torch.cuda-style device arguments.
"""

import pickle
import sys

import torch

from . import _C
from ._utils import _get_device_index

__all__ = [
    "empty_cache",
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "mem_get_info",
    "memory_summary",
    "hal_memory_stats",
    "_record_memory_history",
    "_snapshot",
    "_dump_snapshot",
]


def _index(device):
    return _get_device_index(device, optional=True)


def empty_cache():
    """Returns the cached, unused blocks of every device to the HAL."""
    torch.accelerator.memory.empty_cache()


def memory_stats(device=None):
    """The allocator statistics of a device (torch.cuda.memory_stats keys)."""
    return torch.accelerator.memory.memory_stats(_index(device))


def memory_allocated(device=None):
    """Bytes of device memory occupied by tensors (allocator blocks) on a device."""
    return torch.accelerator.memory.memory_allocated(_index(device))


def max_memory_allocated(device=None):
    return torch.accelerator.memory.max_memory_allocated(_index(device))


def memory_reserved(device=None):
    """Bytes the caching allocator holds on a device (in use and cached)."""
    return torch.accelerator.memory.memory_reserved(_index(device))


def max_memory_reserved(device=None):
    return torch.accelerator.memory.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None):
    torch.accelerator.memory.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    torch.accelerator.memory.reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def mem_get_info(device=None):
    """(free, total) bytes of device memory as the backend reports them."""
    return torch.accelerator.memory.get_memory_info(_index(device))


def hal_memory_stats(device=None):
    """The HAL's raw per-device allocation statistics (hal_device_get_mem_stats)."""
    return _C._hal_mem_stats(_index(device))


def memory_summary(device=None, abbreviated=False):
    """A short human-readable summary of the allocator statistics of a device."""
    index = _index(device)
    stats = memory_stats(index)
    lines = [f"{_C._device_type_name()}:{index} memory (backend {_C._backend_name()})"]
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "reserved_bytes.all.current", "reserved_bytes.all.peak",
                "allocation.all.current", "segment.all.current", "num_ooms"):
        if key in stats:
            lines.append(f"  {key:32s} {stats[key]}")
    return "\n".join(lines)


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                           device=None):
    """Starts or stops recording the device allocator's history, as
    torch.cuda.memory._record_memory_history does for CUDA (the same arguments and defaults):

    * enabled: None (stop, dropping what was recorded), "state" (the stacks of live blocks) or
      "all" (also the list of every allocation and free, at most max_entries per device, the
      oldest dropped first); True and False stand for "all" and None.
    * context: None, "state" (stacks of live blocks only), "alloc" (also of allocations) or
      "all" (also of frees).
    * stacks: "python" (Python and TorchScript frames) or "all" (C++ frames as well, slower).

    Covers every device of the backend (device is accepted for torch.cuda's signature).
    Recording costs a stack walk per allocation; off, one atomic load."""
    del device
    if enabled is True:
        enabled = "all"
    elif enabled is False:
        enabled = None
    _C._memory_record_history(enabled, context if enabled else None, stacks, int(max_entries))


def _snapshot(device=None):
    """The device allocator's state as torch.cuda.memory._snapshot() reports CUDA's:
    ``segments`` (one per HAL segment of every device, with its blocks: address, size,
    requested_size, state "active_allocated", "active_pending_free" or "inactive", and the
    frames of the stack that allocated it, while recording) and ``device_traces`` (per device,
    the recorded actions "alloc", "free_requested" and "free_completed"). It opens in
    torch.cuda._memory_viz and pytorch.org/memory_viz unchanged."""
    del device
    return _C._memory_snapshot()


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Saves :func:`_snapshot` as a pickle, the file pytorch.org/memory_viz opens."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
