"""torch.compile on the torch_hal device (torch_hal.compiler), with no backend argument.

On a device that loads host shared objects (the cpu backend) Inductor generates C++ kernels,
built as for plain CPU tensors and run in place on its host-addressable memory (or, with
TORCH_HAL_COMPILE_LAUNCH=stream, loaded and launched through the HAL program API): where Inductor
generates the same kernels as for plain CPU tensors the results are the same bits; a compiled
training step is bitwise the CPU-compiled one with the patch series (0017, 0021), within
float32 rounding without it (see test_training_step_matches_cpu_compiled).
On other devices (trainium) the Dynamo interface is registered and says why Inductor has no
code generator for the device; where the device takes StableHLO programs torch.compile lowers
to them instead (test_compile_stablehlo.py), and with that turned off
(TORCH_HAL_COMPILE_STABLEHLO=0) the device is one without a code generator.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch._inductor.ir
from torch._dynamo.device_interface import get_interface_for_device
from torch._inductor.utils import run_and_get_code

import torch_hal._cache_key as _cache_key
import torch_hal.compiler as compiler
import torch_hal.programs as programs


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def generates(device):
    return "host_elf" in programs.formats(device)


# The tests of generated code exist only where the device generates code (the cpu backend);
# elsewhere test_no_code_generator checks what happens instead.
GENERATES = "host_elf" in programs.formats()


def fused(x, y):
    return (x * 2 + y).relu().sum(1) + torch.sin(x).mean()


def test_dynamo_interface_is_registered(device_type, device):
    classes = compiler.register()
    assert compiler.register() is classes  # idempotent
    assert (classes is not None) == generates(device)
    iface = get_interface_for_device(device_type)
    assert iface.device_count() == torch.accelerator.device_count()
    assert iface.current_device() == torch.accelerator.current_device_index()
    assert not iface.is_triton_capable()
    reason = iface.codegen_unavailable_reason()
    if generates(device):
        assert reason is None
    elif "stablehlo" in programs.formats(device):
        assert "StableHLO" in reason and device_type in reason
    else:
        assert "NEFF" in reason and device_type in reason


@pytest.mark.parametrize("dynamo_first", [False, True], ids=["torch_first", "dynamo_first"])
def test_dynamo_finds_the_device_before_any_compilation(device_type, dynamo_first):
    """Dynamo's device lookup works in a fresh process before anything was compiled, whether
    torch._dynamo is imported after torch_hal loaded or while torch loads it (it raised
    "No interface for device" until Inductor's first compilation for the device)."""
    imports = "import torch._dynamo, torch" if dynamo_first else "import torch"
    code = (f"{imports}\n"
            "from torch._dynamo.device_interface import get_interface_for_device\n"
            f"iface = get_interface_for_device({device_type!r})\n"
            f"assert iface is get_interface_for_device(torch.device({device_type!r}, 0))\n"
            "assert iface.device_count() == torch.accelerator.device_count()\n"
            "import torch._inductor\n"
            "print(iface.__name__)\n")
    # An emulated machine of its own: this process holds the emulator's NeuronCores.
    env = dict(os.environ, NEURON_EMU_INSTANCE_ID=f"dynamo-lookup-{os.getpid()}")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("Interface")


def test_import_torch_leaves_the_compile_stack_unloaded(device_type):
    """torch_hal loads with torch (its entry point) without importing Dynamo, Inductor,
    torch-mlir or jax (Dynamo alone costs about a second); the backend name ``<device>`` is
    there once Dynamo is."""
    code = ("import sys, torch, torch_hal\n"
            "assert torch_hal.is_loaded(), torch_hal.load_error()\n"
            "print(sorted(m for m in ('torch._dynamo', 'torch._inductor', 'torch_mlir', 'jax')\n"
            "             if m in sys.modules))\n"
            "import torch._dynamo\n"
            f"print({device_type!r} in torch._dynamo.list_backends())\n")
    env = dict(os.environ, NEURON_EMU_INSTANCE_ID=f"import-cost-{os.getpid()}")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:2] == ["[]", "True"], result.stdout


@pytest.mark.parametrize("user_tag", ["", "mine"], ids=["no_user_tag", "user_tag"])
def test_compile_caches_are_keyed_on_the_installed_torch_hal(user_tag, tmp_path):
    """A graph compiled (and cached on disk) with another torch_hal is not reused: the caches'
    key tag names the installed package's digest, after a tag of the user's own."""
    code = ("import torch, torch._dynamo\n"
            "print(torch.compiler.config.cache_key_tag)\n")
    env = dict(os.environ, TORCH_COMPILE_CACHE_KEY_TAG=user_tag,
               NEURON_EMU_LOCK_DIR=str(tmp_path / "neuron-emu"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    ours = _cache_key.TAG_PREFIX + _cache_key.package_digest()
    assert result.stdout.strip() == (f"{user_tag}+{ours}" if user_tag else ours)


def test_package_digest_follows_code_and_libraries(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "module.py").write_text("x = 1\n")
    (tmp_path / "lib" / "libbackend.so").write_bytes(b"\x7fELF one")
    (tmp_path / "notes.txt").write_text("not part of the package's code")
    before = _cache_key.package_digest(str(tmp_path))
    (tmp_path / "notes.txt").write_text("changed")
    assert _cache_key.package_digest(str(tmp_path)) == before
    (tmp_path / "lib" / "libbackend.so").write_bytes(b"\x7fELF two")
    after_library = _cache_key.package_digest(str(tmp_path))
    assert after_library != before
    (tmp_path / "module.py").write_text("x = 2\n")
    assert _cache_key.package_digest(str(tmp_path)) not in (before, after_library)


@pytest.mark.parametrize("launch", ["", "stream"])
def test_compiled_kernels_match_cpu_compiled_bits(device, launch, monkeypatch):
    monkeypatch.setenv("TORCH_HAL_COMPILE_LAUNCH", launch)
    torch.manual_seed(0)
    x, y = torch.randn(64, 33), torch.randn(64, 33)
    out, codes = run_and_get_code(torch.compile(fused), x.to(device), y.to(device))
    ref = torch.compile(fused)(x, y)
    assert out.device == device
    assert torch.equal(out.cpu(), ref)
    torch.testing.assert_close(out.cpu(), fused(x, y))
    code = "\n".join(codes)
    # The generated code never waits for the device itself (load_host_kernel's kernels order
    # themselves after the stream's work).
    assert "load_host_kernel(" in code
    call = code[code.index("def call("):]
    assert "synchronize" not in call


# torch 2.13.0's Inductor picks some lowerings by device type ("cpu" or not): the variance
# algorithm (patch 0017), realization, cat and division by constants (0021). With both patches a
# device with C++ kernels compiles a training step into the CPU's kernels, bit for bit.
LOWERED_AS_CPU = hasattr(torch._inductor.ir, "generates_cpp_kernels")  # patch 0021 (0017 before it)


def compiled_training_steps(dev):
    """Losses and the last step's parameter gradients of two compiled training steps (SGD) of
    a small model."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to(dev)
    x = torch.randn(8, 16).to(dev)
    target = torch.randint(0, 4, (8,)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    step = torch.compile(lambda m, a, t: torch.nn.functional.cross_entropy(m(a), t))
    losses = []
    for _ in range(2):
        loss = step(model, x, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    torch._dynamo.reset()
    return torch.stack(losses), {n: p.grad.cpu() for n, p in model.named_parameters()}


@pytest.mark.parametrize("launch", ["", "stream"])
def test_training_step_matches_cpu_compiled(device, launch, monkeypatch):
    monkeypatch.setenv("TORCH_HAL_COMPILE_LAUNCH", launch)
    cpu_losses, cpu_grads = compiled_training_steps(torch.device("cpu"))
    losses, grads = compiled_training_steps(device)
    if LOWERED_AS_CPU:
        assert torch.equal(losses, cpu_losses)
        for name, grad in grads.items():
            assert torch.equal(grad, cpu_grads[name]), name
    else:  # within float32 rounding (Welford variance, reciprocal multiplications)
        torch.testing.assert_close(losses, cpu_losses, rtol=1e-5, atol=1e-6)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, cpu_grads[name], rtol=1e-5, atol=1e-5)


def attention_block(x, qkv_weight, out_weight, heads, contiguous_heads):
    """A transformer's attention: one fused projection, heads split as [B, S, H, D] and
    transposed (made contiguous [B, H, S, D] with contiguous_heads), causal SDPA, the heads
    merged and projected."""
    batch, seq, width = x.shape
    q, k, v = (x @ qkv_weight).view(batch, seq, 3, heads, width // heads).unbind(2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    if contiguous_heads:
        q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.transpose(1, 2).reshape(batch, seq, width) @ out_weight


@pytest.mark.parametrize("dtype,layout,autocast", [
    (torch.bfloat16, "bshd", False), (torch.float32, "contiguous", False),
    (torch.float32, "bshd", True)], ids=["bfloat16-bshd", "float32-contiguous", "autocast-bshd"])
def test_attention_compiles_and_matches_cpu_compiled(device, dtype, layout, autocast):
    """SDPA in a compiled graph: the bridge's fused attention kernels return what their fake
    kernels declare (a compiled step used to stop in assert_size_stride), forward and backward
    as the CPU's compiled run gives them: heads projected as [B, S, H, D] and transposed, as
    models do (the kernels' layouts are the declared ones), made contiguous (the kernels copy
    into the query's layout), and float32 weights under bfloat16 autocast."""
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32, dtype=dtype)
    weights = [torch.randn(32, 96, dtype=dtype) * 0.1, torch.randn(32, 32, dtype=dtype) * 0.1]

    def run(dev):
        torch._dynamo.reset()
        inputs = [t.detach().clone().to(dev).requires_grad_() for t in [x] + weights]
        fn = torch.compile(lambda x, w, o: attention_block(x, w, o, 4, layout == "contiguous"))
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            out = fn(*inputs)
        out.float().square().sum().backward()
        return [out.detach().cpu()] + [t.grad.cpu() for t in inputs]

    for got, want in zip(run(device), run(torch.device("cpu"))):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


# A kernel as Inductor writes them (extern "C" void kernel(...)): out[i] = in[i] * 2 + 1.
SCALE_KERNEL = r"""
#include <cstdint>
extern "C" void kernel(const float* in_ptr0, float* out_ptr0, const int64_t ks0)
{
    for (int64_t i = 0; i < ks0; ++i)
        out_ptr0[i] = in_ptr0[i] * 2.0f + 1.0f;
}
"""


@pytest.mark.parametrize("launch", ["", "stream"])
def test_kernels_run_after_the_streams_earlier_work(device, host_addressable, launch,
                                                    monkeypatch):
    """Kernels run after the current stream's earlier work, here a kernel launched on the
    stream and still running: by default, where device memory is host-addressable, on the
    calling thread once the stream has done that work (no stream launch, no worker thread to
    wake); with TORCH_HAL_COMPILE_LAUNCH=stream, launched on the stream behind it."""
    if not host_addressable:
        pytest.skip("kernels run in place only where device memory is host-addressable")
    arg_types = ["const float*", "float*", "const int64_t"]
    monkeypatch.setenv("TORCH_HAL_COMPILE_LAUNCH", "stream")
    queued = compiler.load_host_kernel(arg_types, SCALE_KERNEL, device.index or 0)
    monkeypatch.setenv("TORCH_HAL_COMPILE_LAUNCH", launch)
    kernel = compiler.load_host_kernel(arg_types, SCALE_KERNEL, device.index or 0)
    assert isinstance(queued, compiler.HostKernel)
    assert isinstance(kernel, compiler.HostKernel if launch else compiler.InPlaceKernel)
    n = 1 << 22
    src = torch.arange(n, dtype=torch.float32, device=device)
    mid = torch.zeros(n, device=device)
    out = torch.empty(n, device=device)
    expected = (torch.arange(n, dtype=torch.float32) * 2 + 1) * 2 + 1
    for _ in range(3):
        queued(src, mid, n)
        kernel(mid, out, n)
        assert torch.equal(out.cpu(), expected)
        mid.zero_()


def test_copies_and_fills_run_after_the_streams_earlier_work(device, host_addressable,
                                                            monkeypatch):
    """Copies and zero fills of device memory come after the kernels launched before them on
    the current stream; on host-addressable memory they run on the calling thread once the
    stream has done that work (no hand-off to the stream's worker)."""
    if not host_addressable:
        pytest.skip("host kernels are launched only where device memory is host-addressable")
    monkeypatch.setenv("TORCH_HAL_COMPILE_LAUNCH", "stream")
    kernel = compiler.load_host_kernel(["const float*", "float*", "const int64_t"],
                                       SCALE_KERNEL, device.index or 0)
    assert isinstance(kernel, compiler.HostKernel)  # launched on the stream, asynchronously
    n = 1 << 22
    src = torch.arange(n, dtype=torch.float32, device=device)
    out = torch.empty(n, device=device)
    host = torch.empty(n).pin_memory()
    expected = torch.arange(n, dtype=torch.float32) * 2 + 1
    for _ in range(3):
        kernel(src, out, n)
        on_device = out.clone()  # device to device
        host.copy_(out, non_blocking=True)  # device to pinned host
        kernel(src, out, n)
        out.zero_()
        torch.accelerator.synchronize()
        assert torch.equal(on_device.cpu(), expected) and torch.equal(host, expected)
        assert torch.count_nonzero(out.cpu()) == 0


def test_an_unknown_launch_mode_is_refused(device, monkeypatch):
    monkeypatch.setenv("TORCH_HAL_COMPILE_LAUNCH", "threads")
    with pytest.raises(ValueError, match="TORCH_HAL_COMPILE_LAUNCH='threads'"):
        compiler.load_host_kernel(["const float*", "float*", "const int64_t"], SCALE_KERNEL,
                                  device.index or 0)


def test_dynamic_shapes(device):
    f = torch.compile(fused, dynamic=True)
    for n in (5, 17, 40):
        x, y = torch.randn(n, 9), torch.randn(n, 9)
        torch.testing.assert_close(f(x.to(device), y.to(device)).cpu(), fused(x, y))


def test_graph_on_another_device_allocates_there(device_type, device):
    assert torch.accelerator.device_count() >= 2, "the cpu backend has 2 devices by default"
    other = torch.device(device_type, 1)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    out = torch.compile(lambda a, b: a * b + 1)(x.to(other), y.to(other))
    assert out.device == other  # the current device is still 0
    assert torch.equal(out.cpu(), x * y + 1)


def test_compiled_graphs_allocate_with_the_devices_own_call(device_type, device):
    """A compiled graph allocates its buffers with torch_hal._C._empty_strided (as Inductor's
    empty_strided_cpu for CPU graphs), not torch.empty_strided, which cost about 2 us each."""
    x = torch.randn(6, 5)
    out, (code,) = run_and_get_code(torch.compile(lambda a: (a * 2).sum(0) + a.mean()),
                                    x.to(device))
    assert "hal_empty_strided(" in code and "empty_strided(" not in code.replace(
        "hal_empty_strided(", "")
    torch.testing.assert_close(out.cpu(), (x * 2).sum(0) + x.mean())


def test_empty_strided_for_compiled_graphs_checks_its_arguments(device_type):
    from torch_hal._C import _empty_strided

    t = _empty_strided((2, 3), (1, 2), torch.bfloat16, 0)
    assert t.device == torch.device(device_type, 0) and t.dtype == torch.bfloat16
    assert t.shape == (2, 3) and t.stride() == (1, 2)
    with pytest.raises(RuntimeError, match="negative size"):
        _empty_strided((2, -3), (3, 1), torch.float32, 0)
    with pytest.raises(RuntimeError, match="2 sizes and 1 strides"):
        _empty_strided((2, 3), (1,), torch.float32, 0)
    with pytest.raises(TypeError):
        _empty_strided([2, 3], (3, 1), torch.float32, 0)
    with pytest.raises(RuntimeError, match="invalid device index 99"):
        _empty_strided((2,), (1,), torch.float32, 99)


FAILING_KERNEL = r"""
import torch
x = torch.randn(16, device="{dev}")
i = torch.tensor([3, 99], device="{dev}")
f = torch.compile(lambda a, b: a[b] * 2)
try:
    f(x, i).cpu()
except RuntimeError as e:
    print("ERROR:", e)
"""


@pytest.mark.parametrize("launch", ["stream", ""])
def test_a_failing_kernel_reports_its_error(device_type, device, launch):
    """An index Inductor checks in the kernel (out of bounds here) fails the kernel: the error
    names the kernel's check (latched on the stream where kernels are launched, raised by the
    call where they run in place; a child process: a latched stream stays failed)."""
    env = dict(os.environ, TORCH_HAL_COMPILE_LAUNCH=launch)
    proc = subprocess.run([sys.executable, "-c", FAILING_KERNEL.format(dev=device_type)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ERROR:" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "index out of bounds" in proc.stdout


if not GENERATES:
    # Not collected where the device generates no code: they would pass without testing.
    del (test_compiled_kernels_match_cpu_compiled_bits, test_training_step_matches_cpu_compiled,
         test_attention_compiles_and_matches_cpu_compiled,
         test_dynamic_shapes, test_graph_on_another_device_allocates_there,
         test_a_failing_kernel_reports_its_error, test_kernels_run_after_the_streams_earlier_work,
         test_copies_and_fills_run_after_the_streams_earlier_work,
         test_an_unknown_launch_mode_is_refused,
         test_compiled_graphs_allocate_with_the_devices_own_call)

    def test_no_code_generator(device_type, device, monkeypatch):
        """A graph on a device without a code generator: with the patch series (0018) an error
        names the device and the ways out, and run_eagerly_without_codegen runs it eagerly
        after one warning; torch without it stops with KeyError. backend="aot_eager" compiles
        everywhere. A device that takes StableHLO is one with TORCH_HAL_COMPILE_STABLEHLO=0."""
        import torch._inductor.compile_fx as compile_fx
        from torch._inductor import config

        monkeypatch.setenv("TORCH_HAL_COMPILE_STABLEHLO", "0")

        x = torch.randn(4, 4, device=device)
        expected = x.cpu() * 2 + 1
        if hasattr(compile_fx, "_run_captured_graph"):  # patch 0018
            with pytest.raises(Exception, match=f"no code generator for device type "
                                                f"'{device_type}'"):
                torch.compile(lambda a: a * 2 + 1)(x)
            torch._dynamo.reset()
            with config.patch(run_eagerly_without_codegen=True):
                with pytest.warns(UserWarning, match=f"no code generator for device type "
                                                     f"'{device_type}'"):
                    out = torch.compile(lambda a: a * 2 + 1)(x)
            torch.testing.assert_close(out.cpu(), expected)
        else:
            with pytest.raises(Exception, match=f"KeyError: '{device_type}'"):
                torch.compile(lambda a: a * 2 + 1)(x)
        torch._dynamo.reset()
        out = torch.compile(lambda a: a * 2 + 1, backend="aot_eager")(x)
        torch.testing.assert_close(out.cpu(), expected)
