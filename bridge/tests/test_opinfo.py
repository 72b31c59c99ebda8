"""PyTorch's OpInfo database run on the torch_hal device against CPU.

For every op_db entry that supports float32 on CPU: the first sample input(s) are generated on
CPU and, with the same seeds, on the device; the op runs on both (random ops get the same seed,
and the device generator is the same algorithm, so they must agree too); outputs, and gradients
where the op supports autograd, are compared with torch.testing.assert_close. Entries listed in
opinfo_known_failures.txt (one per line with its reason; "name@backend" limits a line to one
backend) are expected to fail. The run prints the pass rate and requires at least 90%.

TORCH_HAL_OPINFO_SAMPLES (default 1) sets how many samples per entry are checked.
"""

import itertools
import os
import random

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from conftest import OPINFO_SUMMARY

try:
    from torch.testing._internal.common_methods_invocations import op_db
except ImportError as exc:  # expecttest (a test dependency of torch.testing._internal) missing
    op_db = []
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = None

pytestmark = [pytest.mark.opinfo,
              pytest.mark.usefixtures("opinfo_samples_without_caller_lookup")]

SAMPLES = int(os.environ.get("TORCH_HAL_OPINFO_SAMPLES", "1"))
REQUIRED_PASS_RATE = 0.90
KNOWN_FAILURES_FILE = os.path.join(os.path.dirname(__file__), "opinfo_known_failures.txt")

# Ops whose outputs are uninitialised memory: only metadata is compared.
UNDEFINED_VALUES = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                    "empty_permuted"}


def entry_name(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def load_known_failures(backend):
    known = {}
    with open(KNOWN_FAILURES_FILE) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            name, _, only = name.partition("@")
            if not only or only == backend:
                known[name] = reason.strip()
    return known


RESULTS = {}  # entry name -> "passed" | "failed" | "skipped"


def seed_everything(seed):
    torch.manual_seed(seed)  # CPU and every torch_hal device (through torch.<device>.manual_seed_all)
    random.seed(seed)
    np.random.seed(seed)


def samples_on(op, device, seed):
    seed_everything(seed)
    samples = op.sample_inputs(device, torch.float32, requires_grad=op.supports_autograd)
    return list(itertools.islice(samples, SAMPLES))  # made one at a time: only these are made


def run(op, sample, seed):
    seed_everything(seed)
    return op(sample.input, *sample.args, **sample.kwargs)


def compare(name, actual, expected, result_device=None):
    """Compares a device result (tree of tensors and values) with the CPU result.

    result_device: where the device result's tensors must be (None: not checked).
    """
    actual_leaves, actual_spec = tree_flatten(actual)
    expected_leaves, expected_spec = tree_flatten(expected)
    assert actual_spec == expected_spec, f"{name}: result structure differs"
    for a, e in zip(actual_leaves, expected_leaves):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{name}: expected a tensor, got {type(a)}"
            if e.device.type != "cpu":  # e.g. meta outputs
                continue
            if result_device is not None:
                assert a.device.type == result_device, f"{name}: result on {a.device}"
            assert a.shape == e.shape and a.dtype == e.dtype, (
                f"{name}: {a.shape}/{a.dtype} vs {e.shape}/{e.dtype}")
            if op_name_of(name) in UNDEFINED_VALUES:
                continue
            torch.testing.assert_close(a.cpu(), e, equal_nan=True, check_device=False,
                                       msg=lambda m: f"{name}: {m}")
        else:
            assert a == e or (a != a and e != e), f"{name}: {a!r} != {e!r}"


def op_name_of(name):
    return name.split(".")[0]


def differentiable_outputs(sample, output):
    output = sample.output_process_fn_grad(output)
    leaves, _ = tree_flatten(output)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad
            and t.dtype.is_floating_point]


def grad_inputs(sample):
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def check_backward(name, sample_cpu, out_cpu, sample_dev, out_dev, seed):
    outs_cpu = differentiable_outputs(sample_cpu, out_cpu)
    outs_dev = differentiable_outputs(sample_dev, out_dev)
    inputs_cpu, inputs_dev = grad_inputs(sample_cpu), grad_inputs(sample_dev)
    if not outs_cpu or not inputs_cpu:
        return
    assert len(outs_cpu) == len(outs_dev) and len(inputs_cpu) == len(inputs_dev)
    generator = torch.Generator().manual_seed(seed)
    grads_cpu = [torch.randn(o.shape, generator=generator, dtype=o.dtype) for o in outs_cpu]
    grads_dev = [g.to(o.device) for g, o in zip(grads_cpu, outs_dev)]
    seed_everything(seed)
    expected = torch.autograd.grad(outs_cpu, inputs_cpu, grads_cpu, allow_unused=True)
    seed_everything(seed)
    actual = torch.autograd.grad(outs_dev, inputs_dev, grads_dev, allow_unused=True)
    for a, e in zip(actual, expected):
        if e is None:
            assert a is None, f"{name}: unexpected gradient"
            continue
        assert a is not None, f"{name}: missing gradient"
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, check_device=False,
                                   msg=lambda m: f"{name} (backward): {m}")


def align_device_sample(sample_cpu, sample_dev):
    """Makes the device sample hold exactly the CPU sample's data.

    Samples generated on the device get the same numbers only if the sample function draws all
    its random numbers on the device; some also make CPU tensors (indices, sizes), which shifts
    the CPU generator between the two runs. So: keep the device sample's placement and non-tensor
    arguments (device strings), and take every tensor's values from the CPU sample.
    """
    cpu_leaves, cpu_spec = tree_flatten((sample_cpu.input, sample_cpu.args, sample_cpu.kwargs))
    dev_leaves, dev_spec = tree_flatten((sample_dev.input, sample_dev.args, sample_dev.kwargs))
    if cpu_spec != dev_spec:
        return sample_dev
    leaves = []
    for c, d in zip(cpu_leaves, dev_leaves):
        if isinstance(c, torch.Tensor) and isinstance(d, torch.Tensor):
            moved = c.detach().to(d.device, copy=True).requires_grad_(c.requires_grad)
            leaves.append(moved)
        elif isinstance(c, (bool, int, float, complex)) and not isinstance(d, torch.Tensor):
            leaves.append(c)  # numbers drawn from the generator (fill values, ...)
        else:
            leaves.append(d)  # device strings, torch.device, modules
    sample_dev.input, sample_dev.args, sample_dev.kwargs = tree_unflatten(leaves, dev_spec)
    return sample_dev


def check_entry(op, device_type):
    name = entry_name(op)
    seed = 1234
    cpu_samples = samples_on(op, "cpu", seed)
    if not cpu_samples:
        return False
    dev_samples = samples_on(op, device_type, seed)
    assert len(dev_samples) == len(cpu_samples), f"{name}: sample count differs"
    for sample_cpu, sample_dev in zip(cpu_samples, dev_samples):
        sample_dev = align_device_sample(sample_cpu, sample_dev)
        out_cpu = run(op, sample_cpu, seed)
        out_dev = run(op, sample_dev, seed)
        leaves, _ = tree_flatten((sample_dev.input, sample_dev.args, sample_dev.kwargs))
        on_device = any(isinstance(t, torch.Tensor) and t.device.type == device_type
                        for t in leaves)
        compare(name, out_dev, out_cpu, device_type if on_device else None)
        if op.supports_autograd:
            check_backward(name, sample_cpu, out_cpu, sample_dev, out_dev, seed)
    return True


@pytest.fixture(scope="module")
def known_failures(backend):
    return load_known_failures(backend)


@pytest.mark.parametrize("op", op_db, ids=entry_name)
def test_opinfo(op, device_type, known_failures):
    name = entry_name(op)
    if torch.float32 not in op.supported_dtypes("cpu"):
        RESULTS[name] = "skipped"
        pytest.skip("no float32 on CPU")
    try:
        tested = check_entry(op, device_type)
    except Exception as exc:
        RESULTS[name] = "failed"
        if name in known_failures:
            pytest.xfail(f"known failure: {known_failures[name]}")
        raise AssertionError(f"{name}: {type(exc).__name__}: {str(exc)[:2000]}") from exc
    if not tested:
        RESULTS[name] = "skipped"
        pytest.skip("no sample inputs")
    RESULTS[name] = "passed"


def test_opinfo_pass_rate(backend, known_failures):
    """Runs after the entries above (file order): the pass rate over the entries tested."""
    if _IMPORT_ERROR:
        pytest.skip(f"torch.testing._internal unavailable: {_IMPORT_ERROR}")
    if not RESULTS:
        pytest.skip("no OpInfo entry ran in this session")
    passed = sorted(n for n, r in RESULTS.items() if r == "passed")
    failed = sorted(n for n, r in RESULTS.items() if r == "failed")
    skipped = [n for n, r in RESULTS.items() if r == "skipped"]
    tested = len(passed) + len(failed)
    OPINFO_SUMMARY.update(
        backend=backend, tested=tested, passed=len(passed), total=len(op_db),
        skipped=len(skipped), known=len([n for n in failed if n in known_failures]),
        unexpected=len([n for n in failed if n not in known_failures]),
        unexpected_names=[n for n in failed if n not in known_failures],
        now_passing=[n for n in passed if n in known_failures])
    rate = len(passed) / tested if tested else 1.0
    print(f"OpInfo pass rate on backend {backend}: {len(passed)}/{tested} = {100 * rate:.1f}%")
    if len(RESULTS) == len(op_db):  # the rate only means something over the whole database
        assert rate >= REQUIRED_PASS_RATE, (
            f"OpInfo pass rate {100 * rate:.1f}% is below {100 * REQUIRED_PASS_RATE:.0f}%")
