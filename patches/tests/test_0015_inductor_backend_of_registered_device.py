"""0015: Inductor's get_current_backend() names the C++ generator the device registered."""

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
