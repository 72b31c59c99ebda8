"""Shared fixtures of the torch_hal tests: the device under test, and the OpInfo summary line.

The tests run on whatever backend TORCH_HAL_BACKEND selects (default: cpu); torch_hal is loaded
by `import torch` through its entry point.
"""

import pytest
import torch

import torch_hal


def pytest_configure(config):
    config.addinivalue_line("markers", "opinfo: PyTorch OpInfo database checks")


@pytest.fixture(scope="session")
def device_type():
    if not torch_hal.is_loaded():
        pytest.skip(f"torch_hal is not loaded: {torch_hal.load_error()}")
    return torch_hal.device_type()


@pytest.fixture(scope="session")
def backend(device_type):
    return torch_hal.backend_name()


@pytest.fixture(scope="session")
def device(device_type):
    return torch.device(device_type, 0)


@pytest.fixture(scope="session")
def devmod(device_type):
    """The torch.<device> module."""
    return getattr(torch, device_type)


@pytest.fixture
def host_addressable(devmod):
    return devmod.get_device_properties(0).host_addressable


# Filled by test_opinfo.py; printed at the end of the run.
OPINFO_SUMMARY = {}


def pytest_terminal_summary(terminalreporter):
    if OPINFO_SUMMARY.get("tested"):
        s = OPINFO_SUMMARY
        terminalreporter.write_sep("-", "OpInfo on the torch_hal device")
        terminalreporter.write_line(
            f"backend {s['backend']}: {s['passed']}/{s['tested']} op_db entries passed "
            f"({100.0 * s['passed'] / s['tested']:.1f}%); {s['known']} known failures, "
            f"{s['unexpected']} unexpected failures, {s['skipped']} entries without float32 "
            f"CPU support or samples, {s['total']} entries in op_db")
        if s.get("unexpected_names"):
            terminalreporter.write_line("unexpected failures: " + ", ".join(s["unexpected_names"]))
        if s.get("now_passing"):
            terminalreporter.write_line("known failures that now pass: "
                                        + ", ".join(s["now_passing"]))
