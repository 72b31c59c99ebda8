"""torch_hal._rng_hops: a compiled checkpoint with dropout on the device, on a torch without patch
0022, recomputes the forward's dropout mask in the backward.

backend="aot_eager" keeps the test off torch_hal's own graph compilers: torch's operators run,
with the workaround (or patch 0022) serving the device.
"""

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp

from torch_hal import _rng_hops


def _checkpointed_dropout(x):
    return cp.checkpoint(lambda x: F.dropout(x, 0.5, training=True) * 2, x, use_reentrant=False)


def _step(fn, device, seed):
    x = torch.ones(64, 64, device=device, requires_grad=True)
    torch.manual_seed(seed)
    out = fn(x)
    out.sum().backward()
    return out.detach().cpu(), x.grad.cpu()


def test_install_is_idempotent(device_type):
    _rng_hops.install(device_type)
    from torch._prims import rng_prims

    kernels = [dict(hop.py_kernels) for hop in
               (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state)]
    _rng_hops.install(device_type)
    assert kernels == [dict(hop.py_kernels) for hop in
                       (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state)]
    key = torch._C.DispatchKey.PrivateUse1
    assert key in rng_prims.run_and_save_rng_state.py_kernels
    assert key in rng_prims.run_with_rng_state.py_kernels


def test_compiled_checkpointed_dropout_recomputes_the_forward_mask(device_type, device):
    _rng_hops.install(device_type)
    compiled = torch.compile(_checkpointed_dropout, backend="aot_eager")
    for seed in (5, 6):
        out, grad = _step(compiled, device, seed)
        eager_out, eager_grad = _step(_checkpointed_dropout, device, seed)
        kept = out != 0
        assert 0.3 < kept.float().mean().item() < 0.7
        # the backward's dropout draws the forward's mask: d(out)/dx = mask * 2 / (1 - p)
        assert torch.equal(grad, torch.where(kept, 4.0, 0.0))
        assert torch.equal(out, eager_out) and torch.equal(grad, eager_grad)


def test_other_devices_keep_torchs_implementations(device_type):
    _rng_hops.install(device_type)
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    x = torch.randn(256)
    before = torch.get_rng_state()
    state, (ref, ref_mask) = run_and_save_rng_state(torch.ops.aten.native_dropout.default,
                                                    x, 0.5, True)
    assert torch.equal(state, before)  # the CPU generator's state, as torch saves it
    out, mask = run_with_rng_state(state, torch.ops.aten.native_dropout.default, x, 0.5, True)
    assert torch.equal(mask, ref_mask) and torch.equal(out, ref)
