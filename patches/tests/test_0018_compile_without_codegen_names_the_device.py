"""0018: torch.compile on a device without an Inductor code generator names the device and the
ways out; torch._inductor.config.run_eagerly_without_codegen runs its graphs as captured.

The device is the torch_hal Trainium backend (its libnrt emulator), which loads no host code:
torch_hal registers it with Dynamo but gives Inductor no Scheduling for it, and with
TORCH_HAL_COMPILE_STABLEHLO=0 does not lower its graphs to StableHLO either. It runs in a child
process under the same interpreter, so it uses the same torch copy.
"""

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import warnings
    import torch
    import torch_hal
    from torch._inductor import config
    assert torch_hal.device_type() == "neuron", torch_hal.device_type()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model = model.to("neuron")
    x = torch.randn(3, 4, device="neuron")

    # By default: an error that names the device and what to do, nothing run.
    try:
        torch.compile(model)(x)
    except Exception as exc:
        message = str(exc)
    else:
        raise AssertionError("compiled without a code generator")
    for words in ("no code generator for device type 'neuron'", "register_backend_for_device",
                  'backend="aot_eager"', "run_eagerly_without_codegen = True"):
        assert words in message, message

    # Opted in: the graphs run as captured, with one warning.
    torch._dynamo.reset()
    with config.patch(run_eagerly_without_codegen=True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torch.compile(model)
            out = compiled(x)
            out.sum().backward()
            out2 = compiled(x * 2)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref = model(x)
    ref.sum().backward()
    assert torch.equal(out.cpu(), ref.cpu())
    assert torch.equal(out2.cpu(), model(x * 2).cpu())
    assert all(torch.equal(g.cpu(), p.grad.cpu()) for g, p in zip(grads, model.parameters()))
    mine = [str(w.message) for w in caught if "no code generator" in str(w.message)]
    assert len(mine) == 1, mine
    assert "'neuron'" in mine[0] and "eagerly" in mine[0], mine[0]
    print("CODEGEN OK")
""")


def test_compile_on_device_without_codegen_names_it_or_runs_eagerly_when_asked(tmp_path):
    # An emulated instance of its own: the unpatched and the patched run go side by side, and
    # NeuronCores belong to one process at a time.
    env = dict(os.environ, TORCH_HAL_BACKEND="trainium", TORCH_HAL_COMPILE_STABLEHLO="0",
               NEURON_EMU_LOCK_DIR=str(tmp_path / "neuron-emu"))
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "CODEGEN OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
