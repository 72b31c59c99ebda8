"""torch_hal.programs: custom kernels from Python, and a custom operator built on one.

On a device that loads host shared objects (the cpu backend) the example kernel of
examples/custom_kernel is compiled and launched, and the example's torch.library operator is
compared with its CPU reference, gradients included. On a device that loads NEFF (trainium on
the libnrt emulator) the emulator's test container runs instead. Whatever a device does not
load is checked to be refused with the HAL's error, so no test is skipped for a backend.
"""

import importlib.util
import os

import pytest
import torch

import torch_hal.programs as programs

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "custom_kernel", "scaled_add.py")

# The libnrt emulator's program container (a test double for NEFF): out = a + b, 4 floats.
EMU_ADD = (b"NRT-EMU-PROGRAM 1\ninput a 16\ninput b 16\noutput out 16\nop add_f32 out a b\n")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("scaled_add_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kernel_so(example, tmp_path_factory):
    return example.build(str(tmp_path_factory.mktemp("kernels")))


def test_formats_match_the_device_property(device):
    names = programs.formats(device)
    assert set(names) <= set(programs.FORMATS)
    for name in set(programs.FORMATS) - set(names):
        with pytest.raises(RuntimeError, match="hal_program_create.*does not load programs"):
            programs.Program(b"\x7fELF not really", format=name, device=device)
    with pytest.raises(ValueError, match="unknown program format"):
        programs.Program(b"x", format="wasm", device=device)


def test_host_elf_kernel_launch(device, kernel_so):
    if "host_elf" not in programs.formats(device):
        with pytest.raises(RuntimeError, match="does not load programs"):
            programs.Program.from_file(kernel_so, device=device)
        return
    with programs.Program.from_file(kernel_so, device=device) as prog:
        k = prog.kernel("scaled_add")
        assert prog.kernel("scaled_add") is k
        assert k.signature == [("pointer", 0)] * 3 + [("scalar", 8)] * 2
        x = torch.arange(10_000, dtype=torch.float32)
        y = torch.full((10_000,), 3.0)
        xd, yd = x.to(device), y.to(device)
        out = torch.empty_like(xd)
        k(xd, yd, out, x.numel(), 2.0, grid=(7,))
        torch.testing.assert_close(out.cpu(), 2.0 * x + y, rtol=0, atol=0)
        # The launch is stream-ordered with the work around it.
        yd.add_(1.0)
        k(xd, yd, out, x.numel(), 0.5, grid=(3,))
        torch.testing.assert_close(out.cpu(), 0.5 * x + y + 1.0, rtol=0, atol=0)
        with pytest.raises(RuntimeError, match="takes 5 arguments"):
            k(xd, yd, out, x.numel())
        with pytest.raises(RuntimeError, match="is a pointer"):
            k(xd, 1, out, x.numel(), 2.0)
        with pytest.raises(RuntimeError, match="the tensor is on cpu"):
            k(x, yd, out, x.numel(), 2.0)
        with pytest.raises(RuntimeError, match="not found|no such kernel"):
            prog.kernel("no_such_kernel")
    with pytest.raises(RuntimeError, match="closed"):
        k(xd, yd, out, x.numel(), 2.0)


def test_corrupt_image_is_refused(device):
    if "host_elf" not in programs.formats(device):
        return  # covered by test_formats_match_the_device_property
    with pytest.raises(RuntimeError, match="hal_program_create.*not a host shared object"):
        programs.Program(b"\x7fELF" + b"\0" * 60, device=device)


def test_neff_program(device):
    if "neff" not in programs.formats(device):
        with pytest.raises(RuntimeError, match="does not load programs"):
            programs.Program(EMU_ADD, format="neff", device=device)
        return
    with programs.Program(EMU_ADD, format="neff", device=device) as prog:
        k = prog.kernel("main")
        assert k.signature == [("pointer", 0)] * 3
        a = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
        b = torch.tensor([10.0, 20.0, 30.0, 40.0], device=device)
        out = torch.empty(4, device=device)
        k(a, b, out)
        assert out.cpu().tolist() == [11.0, 22.0, 33.0, 44.0]
    with pytest.raises(RuntimeError, match="does not execute NEFF"):
        programs.Program(b"NEFF\x01 a real one", format="neff", device=device)


def test_custom_operator_matches_cpu_with_gradients(device, example):
    if "host_elf" not in programs.formats(device):
        return  # the example's kernel is a host shared object
    example.register_device()
    torch.manual_seed(0)
    x = torch.randn(50_000, requires_grad=True)
    y = torch.randn(50_000, requires_grad=True)
    ref = example.scaled_add(x, y, 0.75)
    (ref * ref).sum().backward()
    xd = x.detach().to(device).requires_grad_()
    yd = y.detach().to(device).requires_grad_()
    got = example.scaled_add(xd, yd, 0.75)
    (got * got).sum().backward()
    assert torch.equal(got.detach().cpu(), ref.detach())
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(yd.grad.cpu(), y.grad)
    torch.library.opcheck(example.scaled_add, (xd.detach(), yd.detach(), 0.75))


def test_programs_with_the_same_kernel_names_stay_apart(device, tmp_path):
    """Each program runs its own code, also when its kernel and helper names are another's
    (the images torch.compile generates all name their entry point alike)."""
    import subprocess

    include = os.path.join(os.path.dirname(programs.__file__), "include")
    images = []
    for value in (1.0, 2.0, 3.0):
        src = tmp_path / f"fill{int(value)}.c"
        src.write_text(
            '#include "hal/hal_program.h"\n'
            f"void helper(float *out) {{ *out = {value}f; }}\n"
            '__attribute__((visibility("default"))) const char hal_signature_fill[] = "p";\n'
            '__attribute__((visibility("default"))) hal_status_t fill('
            "const hal_host_kernel_ctx_t *ctx, void *const *args)\n"
            "{ (void)ctx; helper(*(float *const *)args[0]); return HAL_OK; }\n")
        so = tmp_path / f"fill{int(value)}.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-I{include}", str(src), "-o",
                        str(so)], check=True)
        images.append(so.read_bytes())
    out = torch.zeros(1, device=device)
    first = programs.Program(images[0], device=device)
    second = programs.Program(images[1], device=device)
    for prog, expected in ((first, 1.0), (second, 2.0), (first, 1.0)):
        prog.kernel("fill")(out)
        assert out.item() == expected
    first.close()  # a program loaded after another was destroyed is still its own
    third = programs.Program(images[2], device=device)
    third.kernel("fill")(out)
    assert out.item() == 3.0
    second.kernel("fill")(out)
    assert out.item() == 2.0
    second.close()
    third.close()


if "host_elf" not in programs.formats():
    del test_programs_with_the_same_kernel_names_stay_apart  # host shared objects only
