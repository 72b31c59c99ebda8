#!/usr/bin/env python3
"""torch.compile on a torch_hal device of the cuda backend, against eager, on a GPU machine.

    TORCH_HAL_BACKEND=cuda python3 conformance/gpu/compile_check.py

Run by conformance/gpu/run.sh (step "torch.compile") with the bridge the bundle carries on
PYTHONPATH and the backend on HAL_BACKEND_PATH. Inductor generates Triton kernels, which
torch_hal compiles for the device's compute capability and launches through the HAL program API
(bridge/torch_hal/compiler.py). Two checks, each compared with the same code run eagerly on the
same device: a pointwise+reduction graph, and three training steps of a small MLP (losses and
parameters). Prints one line per check ("compile check <name>: pass|FAIL ...") and a closing
"compile checks: N passed, N failed"; exit status 0 when all passed, 1 otherwise.
"""

import os
import sys
import traceback


def fused(x, y):
    return (x * 2 + y).relu().sum(1) + torch.sin(x).mean()


def check_pointwise_reduction(device):
    torch.manual_seed(0)
    for shape in ((64, 33), (1024, 513)):
        x, y = torch.randn(shape, device=device), torch.randn(shape, device=device)
        got = torch.compile(fused)(x, y)
        want = fused(x, y)
        assert got.device == want.device
        torch.testing.assert_close(got.cpu(), want.cpu())
    return "2 shapes equal to eager within float32 tolerance"


def check_training_step(device):
    def make():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                   torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to(device)

    def train(model, step):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(2)
        losses = []
        for _ in range(3):
            x = torch.randn(8, 16, device=device)
            target = torch.randn(8, 4, device=device)
            loss = step(model, x, target)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    def step(model, x, target):
        return torch.nn.functional.mse_loss(model(x), target)

    eager_model, compiled_model = make(), make()
    want = train(eager_model, step)
    got = train(compiled_model, torch.compile(step))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(compiled_model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")
    return f"losses {', '.join(f'{v:.6f}' for v in got)} (eager {want[-1]:.6f} last)"


def uses_triton_kernels(device):
    """Whether the graph really went through Triton kernels launched by the HAL."""
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(64, 33, device=device)
    _, codes = run_and_get_code(torch.compile(fused), x, x)
    code = "\n".join(codes)
    assert "load_triton_kernel(" in code and "@triton.jit" in code, "no Triton kernels"
    return "Inductor's wrapper defines Triton kernels with load_triton_kernel"


def main():
    passed = failed = 0
    try:
        import torch_hal
    except Exception as e:  # noqa: BLE001 - reported, not raised
        print(f"compile check setup: FAIL: cannot import torch_hal: {e}")
        print("compile checks: 0 passed, 1 failed")
        return 1
    if not torch_hal.is_loaded():
        print(f"compile check setup: FAIL: {torch_hal.load_error()}")
        print("compile checks: 0 passed, 1 failed")
        return 1
    import triton

    import torch_hal.compiler
    import torch_hal.programs

    device = torch.device(torch_hal.device_type(), 0)
    try:
        props = torch_hal.compiler._triton_device_properties(0)
        arch = f"{props.name}, sm_{props.major}{props.minor}"
    except RuntimeError as e:  # the triton kernels check below fails too, saying why
        arch = f"no compute capability: {e}"
    print(f"compile check setup: torch {torch.__version__}, triton {triton.__version__}, "
          f"backend {torch_hal.backend_name()}, device {device} ({arch}), program formats "
          f"{torch_hal.programs.formats(0)}")
    for name, check in (("triton kernels", uses_triton_kernels),
                        ("pointwise+reduction", check_pointwise_reduction),
                        ("training step", check_training_step)):
        torch._dynamo.reset()
        try:
            detail = check(device)
            torch.accelerator.synchronize()
            print(f"compile check {name}: pass ({detail})")
            passed += 1
        except Exception as e:  # noqa: BLE001 - each check reports its own failure
            print(f"compile check {name}: FAIL: {type(e).__name__}: {e}")
            traceback.print_exc()
            failed += 1
    print(f"compile checks: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("TORCH_HAL_BACKEND", "cuda")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch

    sys.exit(main())
