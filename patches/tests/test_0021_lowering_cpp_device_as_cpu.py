"""0021: Inductor lowers a graph of a device with C++ kernels as it lowers the CPU's."""

import re

import torch
from torch._inductor.utils import run_and_get_code

from torch_hal import compiler


def scaled_and_joined(a, b):
    # a / 3: a division by a constant (a reciprocal multiplication would round differently);
    # the cat feeds a pointwise use (a ConcatKernel on the CPU).
    return torch.cat([a / 3, b.exp()], dim=1) * 2


def kernel_names(codes):
    return re.findall(r"^(cpp_fused_\w+) = ", "\n".join(codes), re.M)


def test_lowered_as_on_cpu(dev):
    assert compiler.register() is not None, "the device generates no kernels"
    torch.manual_seed(0)
    a, b = torch.randn(64, 33), torch.randn(64, 7)
    out, dev_codes = run_and_get_code(torch.compile(scaled_and_joined), a.to(dev), b.to(dev))
    torch._dynamo.reset()
    ref, cpu_codes = run_and_get_code(torch.compile(scaled_and_joined), a, b)
    assert kernel_names(dev_codes) == kernel_names(cpu_codes)  # the same fusion
    assert torch.equal(out.cpu(), ref)
