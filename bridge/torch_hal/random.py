"""Random number generation of the torch_hal device: one CPU-style (mt19937) generator per device.

States have the CPU generator's format, so torch.<device>.get_rng_state() can be saved and
restored like torch.get_rng_state(), and the same seed gives the same numbers as on CPU.
"""

import torch

from . import _C
from ._utils import _get_device_index

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
]


def _generator(device=None):
    return _C._get_default_generator(_get_device_index(device, optional=True))


def get_rng_state(device=None):
    """The RNG state of a device (default: the current one) as a CPU ByteTensor."""
    return _generator(device).get_state()


def get_rng_state_all():
    return [_C._get_default_generator(i).get_state() for i in range(_C._device_count())]


def set_rng_state(new_state, device=None):
    """Sets the RNG state of a device (default: the current one)."""
    with torch._C._DisableFuncTorch():
        state = new_state.clone(memory_format=torch.contiguous_format).cpu()
    _generator(device).set_state(state)


def set_rng_state_all(new_states):
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed):
    """Seeds the generator of the current device."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed):
    """Seeds the generators of all devices."""
    for index in range(_C._device_count()):
        _C._get_default_generator(index).manual_seed(int(seed))


def seed():
    """Seeds the current device's generator with a non-deterministic number."""
    _generator().seed()


def seed_all():
    """Seeds every device's generator with the same non-deterministic number."""
    generators = [_C._get_default_generator(i) for i in range(_C._device_count())]
    if generators:
        value = generators[0].seed()
        for gen in generators[1:]:
            gen.manual_seed(value)


def initial_seed():
    """The initial seed of the current device's generator."""
    return _generator().initial_seed()
