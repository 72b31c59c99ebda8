"""0017: a compiled layer norm on a device with C++ kernels is bitwise the CPU's."""

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from torch_hal import compiler


def norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def test_layer_norm_variance_as_on_cpu(dev):
    assert compiler.register() is not None, "the device generates no kernels"
    torch.manual_seed(0)
    x, w, b = torch.randn(64, 96), torch.randn(96), torch.randn(96)
    out, dev_codes = run_and_get_code(torch.compile(norm), x.to(dev), w.to(dev), b.to(dev))
    ref, cpu_codes = run_and_get_code(torch.compile(norm), x, w, b)
    # The CPU computes this variance in two passes; Welford's algorithm on the device would
    # differ in the last bits.
    assert "welford" not in "\n".join(cpu_codes).lower()
    assert "welford" not in "\n".join(dev_codes).lower()
    assert torch.equal(out.cpu(), ref)
