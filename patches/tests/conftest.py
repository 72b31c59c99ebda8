"""Shared set-up of the per-patch tests (test_NNNN_*.py).

Each per-patch test exercises the behaviour its patch fixes on the torch_hal device (PyTorch's
PrivateUse1 device, registered by torch's backend autoload): it fails on an unpatched torch 2.13.0
and passes once the series is applied. ``patches/tools/run_tests.py`` runs every test against two
private copies of torch, one unpatched and one patched; when it does, HALPATCH_TORCH_COPY names
the copy and the tests check that this is the torch they imported.
"""

import os
from pathlib import Path

import pytest

PER_PATCH = "test_0"

# The compile-stack tests (0015-0018) compile a few small kernels each: Inductor's pool of
# compile workers would cost more to start than it saves.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


def pytest_collection_modifyitems(config, items):
    if not any(Path(str(i.fspath)).name.startswith(PER_PATCH) for i in items):
        return
    import torch

    copy = os.environ.get("HALPATCH_TORCH_COPY")
    if copy and not Path(torch.__file__).resolve().is_relative_to(Path(copy).resolve()):
        pytest.exit(f"expected torch from {copy}, imported {torch.__file__}", returncode=4)
    try:
        import torch_hal
    except ImportError as e:
        pytest.exit(f"torch_hal is not installed: {e}", returncode=4)
    if not torch_hal.is_loaded():
        pytest.exit(f"torch_hal did not load: {torch_hal.load_error()}", returncode=4)


@pytest.fixture(scope="session")
def dev():
    """The torch_hal device type ("hal" on the cpu backend, "neuron" on Trainium)."""
    import torch_hal

    return torch_hal.device_type()
