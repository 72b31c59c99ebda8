"""0015: a Scheduling declares its kernel language, and Inductor's get_current_backend() asks it.

The device's own Scheduling subclasses CppScheduling; a backend that wraps CppScheduling instead
(as upstream's test/inductor/extension_backends does) declares the language itself, and one that
declares nothing keeps today's answer.
"""

import contextlib

import torch
from torch._inductor import config
from torch._inductor.utils import get_current_backend

from torch_hal import compiler


def masked_bf16(x, m):
    return torch.where(m, x.to(torch.bfloat16) * 3, 0).float().sum(), torch.nn.functional.pad(
        x, (1, 1)) * 2


def test_current_backend_is_cpp(dev):
    assert compiler.register() is not None, "the device generates no kernels"
    from torch._inductor.codegen.common import init_backend_registration

    init_backend_registration()
    # CUDA's setting (the default "triton") must not decide for another device.
    with config.patch(cuda_backend="triton"):
        assert get_current_backend(dev) == "cpp"
        assert get_current_backend("cuda") == "triton"


def test_masked_bf16_compiles_with_cuda_backend_triton(dev):
    compiler.register()
    torch.manual_seed(0)
    x = torch.randn(8, 9)
    m = x > 0
    with config.patch(cuda_backend="triton"):
        out = torch.compile(masked_bf16)(x.to(dev), m.to(dev))
        ref = torch.compile(masked_bf16)(x, m)
    for a, b in zip(out, ref):
        assert a.device.type == dev
        assert torch.equal(a.cpu(), b)


@contextlib.contextmanager
def _registered(dev, scheduling_cls):
    """``scheduling_cls`` as the device's Scheduling (its wrappers kept), then the original."""
    from torch._inductor.codegen import common

    compiler.register()
    common.init_backend_registration()
    original = common.device_codegens[dev]
    common.register_backend_for_device(dev, scheduling_cls, original.wrapper_codegen,
                                       original.cpp_wrapper_codegen)
    try:
        yield
    finally:
        common.device_codegens[dev] = original


def _wrapping_scheduling(language):
    """A Scheduling that wraps the device's own (a CppScheduling) instead of subclassing it."""
    from torch._inductor.codegen.common import get_scheduling_for_device
    from torch._inductor.scheduler import BaseScheduling

    inner_cls = get_scheduling_for_device(torch_hal_device())

    class Wrapping(BaseScheduling):
        def __init__(self, scheduler):
            super().__init__(scheduler)
            self._inner = inner_cls(scheduler)

        def __getattr__(self, name):  # every other method is the wrapped Scheduling's
            return getattr(self._inner, name)

        def can_fuse_vertical(self, node1, node2):
            return self._inner.can_fuse_vertical(node1, node2)

        def can_fuse_horizontal(self, node1, node2):
            return self._inner.can_fuse_horizontal(node1, node2)

        def group_fn(self, sizes):
            return self._inner.group_fn(sizes)

        def codegen_node(self, node):
            return self._inner.codegen_node(node)

        def codegen_sync(self):
            return self._inner.codegen_sync()

        def flush(self):
            return self._inner.flush()

    if language is not None:
        Wrapping.kernel_language = language
    return Wrapping


def torch_hal_device():
    import torch_hal

    return torch_hal.device_type()


def test_a_wrapping_scheduling_declares_cpp_and_compiles(dev):
    compiler.register()
    with _registered(dev, _wrapping_scheduling("cpp")):
        with config.patch(cuda_backend="triton"):
            assert get_current_backend(dev) == "cpp"
            torch._dynamo.reset()
            torch.manual_seed(0)
            x = torch.randn(8, 9)
            m = x > 0
            out = torch.compile(masked_bf16)(x.to(dev), m.to(dev))
            ref = torch.compile(masked_bf16)(x, m)
        for a, b in zip(out, ref):
            assert torch.equal(a.cpu(), b)
    torch._dynamo.reset()


def test_a_scheduling_that_declares_nothing_keeps_todays_answer(dev):
    compiler.register()
    with _registered(dev, _wrapping_scheduling(None)):
        with config.patch(cuda_backend="triton"):
            assert get_current_backend(dev) == "triton"
