"""0016: the scheduler keeps its loop reordering off C++ kernels of a non-CPU device."""

import torch
import torch.nn.functional as F
from torch._inductor import config
from torch._inductor.utils import run_and_get_code

from torch_hal import compiler

LOOP_TRANSFORMS = dict(loop_ordering_after_fusion=True, loop_reindexing_after_fusion=True,
                       loop_index_inversion_in_fusion=True)


def transposed_and_normed(x, w):
    y = x.t().contiguous() * 2
    z = F.layer_norm(x + 1, (x.shape[1],), w, None)
    return y, z, (y.t() * z).sum(1)


def test_loop_transforms_on_leave_cpp_kernels_alone(dev):
    assert compiler.register() is not None, "the device generates no kernels"
    torch.manual_seed(0)
    x, w = torch.randn(32, 48), torch.randn(48)
    with config.patch(LOOP_TRANSFORMS):
        out, codes = run_and_get_code(torch.compile(transposed_and_normed), x.to(dev),
                                      w.to(dev))
    assert "load_host_kernel(" in "\n".join(codes)
    for a, b in zip(out, transposed_and_normed(x, w)):
        assert a.device.type == dev
        torch.testing.assert_close(a.cpu(), b)
