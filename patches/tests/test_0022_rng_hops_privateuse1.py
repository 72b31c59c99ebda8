"""0022: a random op recomputed by a compiled checkpoint replays the forward's RNG state on the
PrivateUse1 device.

The partitioner wraps the checkpointed dropout in run_and_save_rng_state (forward) and
run_with_rng_state (backward); without the patch both refuse the device ("Backend not supported
for neuron"). The graphs are compiled with backend="aot_eager", so torch's own operators run, not
torch_hal's StableHLO path (whose graph compiler puts torch_hal's run-time workaround in place,
torch_hal._rng_hops; the child checks that it is not). It runs on the torch_hal Trainium backend
(its libnrt emulator) in a child process under the same interpreter, so it uses the same torch
copy.
"""

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import sys
    import torch
    import torch.nn.functional as F
    import torch.utils.checkpoint as cp
    import torch_hal
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state

    dev = torch_hal.device_type()
    assert dev == "neuron", dev
    hops = sys.modules.get("torch_hal._rng_hops")
    assert hops is None or not hops.installed(), "torch_hal's workaround is in place"

    # the operators themselves: the replay draws the saved state's numbers
    x = torch.randn(256, device=dev)
    state, (ref, ref_mask) = run_and_save_rng_state(torch.ops.aten.native_dropout.default,
                                                    x, 0.5, True)
    out, mask = run_with_rng_state(state, torch.ops.aten.native_dropout.default, x, 0.5, True)
    assert torch.equal(mask.cpu(), ref_mask.cpu()) and torch.equal(out.cpu(), ref.cpu())
    after, _ = torch.ops.aten.native_dropout.default(x, 0.5, True)
    assert not torch.equal(after.cpu(), ref.cpu()), "the replay did not restore the state"

    def f(x):
        return cp.checkpoint(lambda x: F.dropout(x, 0.5, training=True) * 2, x,
                             use_reentrant=False)

    def step(fn, seed):
        x = torch.ones(64, 64, device=dev, requires_grad=True)
        torch.manual_seed(seed)
        out = fn(x)
        out.sum().backward()
        return out.detach().cpu(), x.grad.cpu()

    compiled = torch.compile(f, backend="aot_eager")
    for seed in (5, 6):
        out, grad = step(compiled, seed)
        eager_out, eager_grad = step(f, seed)
        kept = out != 0
        assert 0.3 < kept.float().mean().item() < 0.7, kept.float().mean()
        # the recomputed mask is the forward's: d(out)/dx = mask * 2 / (1 - p)
        assert torch.equal(grad, torch.where(kept, 4.0, 0.0)), "the backward drew another mask"
        assert torch.equal(out, eager_out) and torch.equal(grad, eager_grad)
    print("RNG HOPS OK")
""")


def test_compiled_checkpointed_dropout_replays_the_forward_mask(tmp_path):
    # An emulated instance of its own: the unpatched and the patched run go side by side, and
    # NeuronCores belong to one process at a time.
    env = dict(os.environ, TORCH_HAL_BACKEND="trainium",
               NEURON_EMU_LOCK_DIR=str(tmp_path / "neuron-emu"))
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "RNG HOPS OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
