"""torch.compile's Triton path (torch_hal.compiler) as far as a machine without a GPU goes.

On a device that loads cubin and is not host-addressable (the cuda backend) Inductor generates
Triton kernels, compiled for the device's compute capability and launched through the HAL
program API. What needs no GPU is checked here: Inductor's own kernels (fixtures/
inductor_triton_kernels.py) compile to sm_90 cubins with an explicit target; the launcher's
arguments match the compiled kernel's parameters (order, sizes, constexprs left out, Triton's
two scratch pointers last); and Inductor, with the Triton code generation registered, generates
the kernels and hands their sm_90 cubins to hal_program_create, which this machine's backend
refuses. Launching them and comparing with eager runs only on a GPU (conformance/gpu/run.sh).
"""

import importlib.util
import os
import re
import struct
import subprocess
import sys
import textwrap

import pytest
import torch
import triton  # noqa: F401  (a project dependency: make deps-python installs it)

import torch_hal.compiler as compiler

HERE = os.path.dirname(os.path.abspath(__file__))
EM_CUDA = 190
# Inductor's first configuration of each fixture kernel: constexprs and num_warps.
CONFIGS = {"triton_red_fused_mean_sin_0": ({"XBLOCK": 1, "R0_BLOCK": 512}, 4),
           "triton_per_fused_add_mean_mul_relu_sin_sum_1": ({"XBLOCK": 8}, 2)}


def _fixture():
    path = os.path.join(HERE, "fixtures", "inductor_triton_kernels.py")
    spec = importlib.util.spec_from_file_location("inductor_triton_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compiled():
    """The fixture kernels compiled for sm_90: {name: CompiledKernel}."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # what Inductor's meta says
    kernels = _fixture()
    out = {}
    for name, fn in kernels.KERNELS.items():
        meta = kernels.TRITON_META[name]
        constexprs, num_warps = CONFIGS[name]
        out[name] = compiler.compile_triton(fn, meta["signature"],
                                            {**meta["constants"], **constexprs},
                                            meta["configs"][0],
                                            {"num_warps": num_warps, "num_stages": 1}, 90)
    return out


def ptx_parameters(binary):
    """[(bytes, is_pointer)] of the kernel's entry in the PTX Triton produced."""
    entry = re.search(r"\.entry\s+" + re.escape(binary.metadata.name) + r"\s*\((.*?)\)",
                      binary.asm["ptx"], re.S)
    assert entry, "the PTX has the kernel's entry"
    params = re.findall(r"\.param\s+\.([usfb])(\d+)(\s+\.ptr)?", entry.group(1))
    return [(int(bits) // 8, bool(ptr)) for _, bits, ptr in params]


@pytest.mark.own_backend  # compiles for sm_90 whatever the backend: once, in the cpu run
def test_inductor_kernels_compile_to_sm90_cubins(compiled):
    for name, binary in compiled.items():
        cubin = binary.asm["cubin"]
        assert cubin[:4] == b"\x7fELF"
        assert struct.unpack_from("<H", cubin, 18)[0] == EM_CUDA
        (flags,) = struct.unpack_from("<I", cubin, 48)
        assert 90 in ((flags >> 8) & 0xFF, flags & 0xFF), f"{name}: flags 0x{flags:x}"
        assert binary.metadata.name == name
        assert binary.metadata.target.arch == 90


@pytest.mark.own_backend  # compiles for sm_90 whatever the backend: once, in the cpu run
def test_launch_arguments_follow_the_compiled_kernels_parameters(compiled):
    x, y = torch.ones(64, 33), torch.ones(64, 33)
    mean, out = torch.zeros(()), torch.zeros(64)
    # The arguments as Inductor's launcher passes them: every argument of the source,
    # constexprs included (xnumel of the looped reduction is one, between two others).
    calls = {"triton_red_fused_mean_sin_0": ((x, mean, 1, 2112, 1, 512),
                                             [x, mean, struct.pack("<i", 2112)]),
             "triton_per_fused_add_mean_mul_relu_sin_sum_1": (
                 (out, x, y, mean, 64, 33, 8),
                 [out, x, y, mean, struct.pack("<i", 64), struct.pack("<i", 33)])}
    for name, (args, expected) in calls.items():
        binary = compiled[name]
        launcher = compiler.TritonLauncher(binary)
        packed = launcher.pack(args, (8, 1, 1))
        params = ptx_parameters(binary)
        assert len(packed) == len(params) == len(expected) + 2, name
        for value, (size, is_pointer) in zip(packed, params):
            if isinstance(value, torch.Tensor):
                assert is_pointer
            else:
                assert len(value) == size
        for got, want in zip(packed, expected):
            assert got is want if isinstance(want, torch.Tensor) else got == want
        # Triton's global and profile scratch pointers, NULL: these kernels need none.
        assert binary.metadata.global_scratch_size == 0
        assert binary.metadata.profile_scratch_size == 0
        assert packed[-2:] == [bytes(8), bytes(8)]
        assert launcher.threads == CONFIGS[name][1] * 32
        assert launcher.shared == binary.metadata.shared


@pytest.mark.own_backend  # uses no device: once, in the cpu run
def test_scalars_are_encoded_as_tritons_launcher_encodes_them():
    encode = compiler._triton_scalar_bytes
    assert encode(True, "i1") == b"\x01"
    assert encode(-2, "i8") == b"\xfe"
    assert encode(-2, "i32") == struct.pack("<i", -2)
    assert encode(2**40, "i64") == struct.pack("<q", 2**40)
    assert encode(2**63, "u64") == struct.pack("<Q", 2**63)
    assert encode(1.5, "fp16") == struct.pack("<e", 1.5)
    assert encode(1.0, "bf16") == b"\x80\x3f"  # the float's top half, truncated
    assert encode(1.0 + 2**-10, "bf16") == b"\x80\x3f"
    assert encode(0.1, "fp32") == struct.pack("<f", 0.1)
    assert encode(0.1, "fp64") == struct.pack("<d", 0.1)


@pytest.mark.own_backend  # compiles for sm_90 whatever the backend: once, in the cpu run
def test_launcher_refuses_wrong_arguments(compiled):
    launcher = compiler.TritonLauncher(compiled["triton_red_fused_mean_sin_0"])
    x = torch.ones(4)
    with pytest.raises(ValueError, match="takes 6 arguments"):
        launcher.pack((x, x, 1, 4), (1, 1, 1))
    with pytest.raises(TypeError, match="a pointer takes a tensor or None"):
        launcher.pack((x.data_ptr(), x, 1, 4, 1, 512), (1, 1, 1))
    with pytest.raises(NotImplementedError, match="pointers and scalars only"):
        compiler.triton_parameters({"desc": "tensordesc<fp32[16]>", "n": "i32"})


@pytest.mark.own_backend  # compiles for sm_90 whatever the backend: once, in the cpu run
def test_launches_the_hal_cannot_express_are_refused():
    fn = _fixture().KERNELS["triton_red_fused_mean_sin_0"]
    meta = _fixture().TRITON_META["triton_red_fused_mean_sin_0"]
    binary = compiler.compile_triton(fn, meta["signature"],
                                     {**meta["constants"], "XBLOCK": 1, "R0_BLOCK": 512},
                                     meta["configs"][0], {"num_warps": 4, "launch_pdl": True},
                                     90)
    with pytest.raises(NotImplementedError, match="launch_pdl"):
        compiler.TritonLauncher(binary)


def test_this_device_does_not_take_triton_kernels(device):
    # The cpu backend (host-addressable, host_elf) and trainium (NEFF) keep their paths.
    assert compiler._triton_format(device.index) is None
    # No GPU: the compute capability cannot be asked, whether no CUDA runtime is loaded (a CPU
    # build of torch) or the one a CUDA build loads finds no device.
    with pytest.raises(RuntimeError, match="no CUDA runtime|returned CUDA error"):
        compiler._cuda_device_properties(device.index)


@pytest.mark.own_backend
def test_inductor_generates_triton_kernels_and_loads_them_through_the_hal(tmp_path):
    # Triton code generation registered for a cpu-backend device as for a cuda-backend device
    # of compute capability 9.0 (in a child process: the registration is process-wide). The
    # kernels compile; the device, which loads no cubin, refuses them in hal_program_create.
    script = textwrap.dedent("""
        import sys
        import torch
        import torch_hal, torch_hal.compiler as compiler
        sys.path.insert(0, sys.argv[1])
        from inductor_triton_kernels import fused

        h200 = compiler._TritonDeviceProperties(
            name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
            max_threads_per_multi_processor=2048, max_threads_per_block=1024,
            regs_per_multiprocessor=65536, warp_size=32)
        device_type = torch_hal.device_type()
        compiler._registered = {"classes": compiler._register_triton(device_type, h200)}
        x = torch.randn(64, 33, device=device_type)
        try:
            torch.compile(fused)(x, x)
        except Exception as e:
            print(e)
            sys.exit(0)
        sys.exit("the compiled graph ran: the device took a cubin")
        """)
    env = dict(os.environ, TORCH_HAL_BACKEND="cpu",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               TORCHINDUCTOR_COMPILE_THREADS="1", TRITON_CACHE_DIR=str(tmp_path / "triton"),
               TRITON_DEFAULT_FP_FUSION="1")
    r = subprocess.run([sys.executable, "-c", script, os.path.join(HERE, "fixtures")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"loading Triton kernel triton_\w+ \(sm_90 cubin, \d+ bytes\)", r.stdout)
    assert "hal_program_create" in r.stdout and "cubin" in r.stdout
    wrappers = [p for p in (tmp_path / "inductor").rglob("*.py")
                if "load_triton_kernel(" in p.read_text()]
    assert wrappers, "Inductor's wrapper defines its kernels with load_triton_kernel"
    code = wrappers[0].read_text()
    assert "@triton.jit" in code and "get_raw_stream" in code
    assert "async_compile.triton(" not in code
