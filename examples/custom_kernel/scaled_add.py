"""A custom operator whose device implementation is a custom kernel launched through the HAL.

``torch_hal_example::scaled_add(x, y, alpha)`` computes ``alpha * x + y``. Its CPU
implementation is the PyTorch reference; on the torch_hal device it launches the kernel of
``scaled_add.c``, compiled here into a host shared object with the system's C compiler and
loaded with :class:`torch_hal.programs.Program` (the cpu backend loads host shared objects).
Autograd goes through ``torch.library.register_autograd``; ``register_fake`` gives shapes to
torch.compile. Run it as a script to compare the device with the CPU, gradients included:

    python3 examples/custom_kernel/scaled_add.py
"""

import os
import shutil
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "..", "..", "hal", "include")
BLOCK_ELEMENTS = 4096  # elements per block, so small tensors take one block
MAX_BLOCKS = 64


def build(out_dir):
    """Compiles scaled_add.c into out_dir/scaled_add.so and returns its path."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (set CC, or install gcc) to build the example kernel")
    out = os.path.join(out_dir, "scaled_add.so")
    # No FMA contraction: the kernel rounds alpha * x and the sum separately, as torch does.
    cmd = [cc, "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-I", INCLUDE,
           os.path.join(HERE, "scaled_add.c"), "-o", out]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr}")
    return out


_programs = {}  # device index -> Program


def _kernel(device):
    import torch_hal.programs

    if device.index not in _programs:
        with tempfile.TemporaryDirectory() as tmp:
            _programs[device.index] = torch_hal.programs.Program.from_file(build(tmp),
                                                                           device=device)
    return _programs[device.index].kernel("scaled_add")


@torch.library.custom_op("torch_hal_example::scaled_add", mutates_args=(), device_types="cpu")
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x + y (float32); the CPU reference."""
    return x * alpha + y


def _device_scaled_add(x, y, alpha):
    if x.dtype != torch.float32 or y.dtype != torch.float32 or x.shape != y.shape:
        raise ValueError("scaled_add takes two float32 tensors of one shape")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        blocks = max(1, min(MAX_BLOCKS, n // BLOCK_ELEMENTS))
        _kernel(x.device)(x, y, out, n, float(alpha), grid=(blocks,))
    return out


@scaled_add.register_fake
def _(x, y, alpha):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.alpha = inputs[2]


def _backward(ctx, grad):
    return grad * ctx.alpha, grad, None


scaled_add.register_autograd(_backward, setup_context=_setup_context)


_registered = False


def register_device():
    """Registers the kernel as the operator's implementation on the torch_hal device (once)."""
    global _registered
    import torch_hal

    if not torch_hal.is_loaded():
        raise RuntimeError(f"torch_hal is not loaded: {torch_hal.load_error()}")
    if not _registered:
        scaled_add.register_kernel(torch_hal.device_type())(_device_scaled_add)
        _registered = True


def main():
    import torch_hal

    register_device()
    dev = torch.device(torch_hal.device_type(), 0)
    torch.manual_seed(0)
    x = torch.randn(100_000, requires_grad=True)
    y = torch.randn(100_000, requires_grad=True)
    ref = scaled_add(x, y, 0.5)
    ref.sum().backward()
    xd = x.detach().to(dev).requires_grad_()
    yd = y.detach().to(dev).requires_grad_()
    got = scaled_add(xd, yd, 0.5)
    got.sum().backward()
    same = torch.equal(got.cpu(), ref.detach())
    grads = torch.equal(xd.grad.cpu(), x.grad) and torch.equal(yd.grad.cpu(), y.grad)
    print(f"scaled_add on {dev}: output equal to the CPU reference: {same}; "
          f"gradients equal: {grads}")
    return 0 if same and grads else 1


if __name__ == "__main__":
    sys.exit(main())
