"""Shared fixtures of the torch_hal tests: the device under test, and the OpInfo summary line.

The tests run on whatever backend TORCH_HAL_BACKEND selects (default: cpu); torch_hal is loaded
by `import torch` through its entry point. A backend that cannot be opened fails every test
that needs the device, with the backend's name and the HAL's message: it is never a skip.

A test run is an emulated Trainium machine of its own: unless NEURON_EMU_INSTANCE_ID or
NEURON_EMU_LOCK_DIR is set, the libnrt emulator's NeuronCores of this run belong to an instance
id made for it (before `import torch` opens the backend), so runs beside it never take its
cores, while the processes it starts (the distributed tests' ranks) inherit the id and exclude
each other as on one machine. Likewise its compile caches (TORCH_HAL_STABLEHLO_CACHE,
NEURON_EMU_XLA_CACHE) are its own unless set, removed at the end.
"""

import json
import os
import secrets
import shutil
import subprocess
import sys

_NEURON_INSTANCE = None
if not os.environ.get("NEURON_EMU_INSTANCE_ID") and not os.environ.get("NEURON_EMU_LOCK_DIR"):
    _NEURON_INSTANCE = f"pytest-{os.getpid()}-{secrets.token_hex(4)}"
    os.environ["NEURON_EMU_INSTANCE_ID"] = _NEURON_INSTANCE

# The compile caches of this run (lowerings, the emulator's XLA executables): its own, so every
# run lowers and compiles what it tests, and the processes it starts share them.
_CACHE_DIR = None
if "TORCH_HAL_STABLEHLO_CACHE" not in os.environ or "NEURON_EMU_XLA_CACHE" not in os.environ:
    import tempfile

    _CACHE_DIR = tempfile.mkdtemp(prefix="torch-hal-test-caches-")
    os.environ.setdefault("TORCH_HAL_STABLEHLO_CACHE", os.path.join(_CACHE_DIR, "stablehlo"))
    os.environ.setdefault("NEURON_EMU_XLA_CACHE", os.path.join(_CACHE_DIR, "neuron-emu-xla"))

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_hal  # noqa: E402


# PyTorch's OpenReg suite as upstream wrote it (openreg_upstream/): its files are run only through
# their renamed copies (tools/openreg_rename.py), never collected as they stand.
collect_ignore = ["openreg_upstream"]


def _neuron_instance_dir(instance):
    """Where the emulator keeps the lock files of an instance id (its default lock directory)."""
    base = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, f"neuron-emu-{os.geteuid()}", instance)


def _requested_backend():
    return os.environ.get("TORCH_HAL_BACKEND", "cpu") or "cpu"


def _load_failure():
    return (f"torch_hal could not open the requested HAL backend '{_requested_backend()}' "
            f"(TORCH_HAL_BACKEND): {torch_hal.load_error()}")


def pytest_configure(config):
    config.addinivalue_line("markers", "opinfo: PyTorch OpInfo database checks")
    config.addinivalue_line(
        "markers", "own_backend: the test starts processes on a backend it chooses itself, "
        "or uses no device at all, whatever TORCH_HAL_BACKEND this run has; it is the "
        "same test in every run, so "
        "`make test-bridge` runs it once (in the cpu run: the trainium run passes "
        "-m 'not own_backend')")
    config.addinivalue_line(
        "markers", "own_backend_trainium: as own_backend, with processes on the Trainium backend; "
        "`make test-bridge` runs it once, in the trainium run (the cpu run passes "
        "-m 'not own_backend_trainium'), which is the shorter of the two")
    config.addinivalue_line(
        "markers", "backend_neutral: the same test whatever the run's backend (the bridge's "
        "kernels against their fake kernels); "
        "`make test-bridge` runs it once, in the trainium run (the cpu run passes "
        "-m 'not backend_neutral'), to balance the two runs")
    config.addinivalue_line(
        "markers", "zoo: the model zoo's compiled runs (every model compiled, FSDP2 with "
        "torch.compile on two ranks); `make test-bridge` leaves them out (-m 'not zoo'), "
        "`make test-zoo` runs them")


def pytest_unconfigure(config):
    if _NEURON_INSTANCE is not None:
        shutil.rmtree(_neuron_instance_dir(_NEURON_INSTANCE), ignore_errors=True)
    if _CACHE_DIR is not None:
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session")
def device_type():
    if not torch_hal.is_loaded():
        pytest.fail(_load_failure(), pytrace=False)
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


@pytest.fixture(scope="module")
def opinfo_samples_without_caller_lookup():
    """OpInfo's ``sample_inputs()`` looks for the unittest.TestCase that called it, to name the
    test in its messages, with ``inspect.stack()``: that resolves the module of every frame by
    scanning ``sys.modules``, about 0.1 s per call once the earlier tests have imported the
    compile stack and transformers. Pytest test functions are no TestCase, so the search always
    finds nothing; going without it changes no sample, only the time (test_opinfo.py in a whole
    suite run: 150-250 s before, about 40 s without it)."""
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    with pytest.MonkeyPatch.context() as patch:
        for module in (common_utils, core):  # core imported the name for itself
            patch.setattr(module, "extract_test_fn", lambda: None)
        yield


@pytest.fixture
def host_addressable(devmod):
    return devmod.get_device_properties(0).host_addressable


@pytest.fixture
def traced_child(tmp_path):
    """Runs Python ``code`` in a child process on the Trainium backend under the HAL's trace
    layer (an emulated machine of its own, under ``tmp_path``), checks that it printed OK, and
    returns the names of the HAL calls it made, in order, between its marker (a device
    allocation of at least 40 MiB) and its first device_synchronize after that."""
    def run(code):
        trace = tmp_path / "trace.json"
        env = dict(os.environ, TORCH_HAL_BACKEND="trainium", HAL_LAYERS="trace",
                   HAL_TRACE_FILE=str(trace), NEURON_EMU_LOCK_DIR=str(tmp_path / "neuron-emu"))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0 and "OK" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
        events = json.loads(trace.read_text())
        events = events["traceEvents"] if isinstance(events, dict) else events
        events = sorted((e for e in events if e.get("cat") == "hal" and "ts" in e),
                        key=lambda e: e["ts"])
        marks = [e["ts"] for e in events if e["name"] == "mem_alloc"
                 and e["args"].get("kind") == "device" and e["args"].get("bytes", 0) >= 40 << 20]
        assert len(marks) == 1, marks
        end = next(e["ts"] for e in events
                   if e["name"] == "device_synchronize" and e["ts"] > marks[0])
        return [e["name"] for e in events if marks[0] < e["ts"] < end]

    return run


# Filled by test_opinfo.py; printed at the end of the run.
OPINFO_SUMMARY = {}

def pytest_terminal_summary(terminalreporter):
    if not torch_hal.is_loaded():
        terminalreporter.write_sep("!", "the backend under test could not be opened")
        terminalreporter.write_line(_load_failure())
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
