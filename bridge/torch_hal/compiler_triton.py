"""torch.compile on devices that load cubin (the cuda backend): Triton kernels through the HAL.

Inductor's own Triton scheduling generates the kernels; each is compiled by the triton package
to a cubin for the device's compute capability (an explicit GPUTarget: neither Triton's CUDA
driver nor torch.cuda is used), loaded with hal_program_create (torch_hal.programs) and launched
with hal_kernel_launch on the stream Inductor's code passes (the device's current stream), with
Triton's calling convention: the kernel's arguments without its constexprs, then the global and
profile scratch pointers Triton appends to every kernel.

:mod:`torch_hal.compiler` registers the device with Dynamo and Inductor and re-exports what this
module defines; this module uses its device-interface and code-generator factories.
"""

import dataclasses
import os

import torch

from . import _C, programs
from ._utils import _get_device_index
from .compiler import (_make_codegen, _make_cpp_wrapper_refusal, _make_interface,
                       _make_op_overrides, get_raw_stream)

# struct format of each Triton scalar type as its launcher passes it (triton 3.x,
# backends/nvidia/driver.c: i1 is a byte, fp16 an IEEE half, bf16 the float's top 16 bits).
_TRITON_SCALAR_FORMATS = {"i1": "b", "i8": "b", "u1": "B", "u8": "B", "i16": "h", "u16": "H",
                          "i32": "i", "u32": "I", "i64": "q", "u64": "Q", "fp16": "e",
                          "bf16": "bf16", "fp32": "f", "f32": "f", "fp64": "d"}
_NULL_POINTER = bytes(8)  # a pointer parameter passed as its 8 bytes, for NULL


def _triton_scalar_bytes(value, triton_type):
    """The bytes Triton's launcher passes for a scalar argument of ``triton_type``."""
    import struct

    fmt = _TRITON_SCALAR_FORMATS[triton_type]
    if fmt == "bf16":
        return struct.pack("<I", struct.unpack("<I", struct.pack("<f", float(value)))[0])[2:]
    if fmt in "efd":
        return struct.pack("<" + fmt, float(value))
    return struct.pack("<" + fmt, int(value))


def triton_parameters(signature):
    """The kernel parameters of a compiled Triton kernel, in order, from its source signature
    ({argument: Triton type}, constexprs typed "constexpr"): [(name, type)] for every argument
    that is not a constexpr, then Triton's two scratch pointers ("global_scratch" and
    "profile_scratch", type "*i8"). Raises NotImplementedError for argument kinds the HAL
    launcher does not pass (tensor descriptors, tuples)."""
    params = []
    for name, kind in signature.items():
        if kind == "constexpr":
            continue
        if not isinstance(kind, str) or not (kind.startswith("*") or kind in
                                             _TRITON_SCALAR_FORMATS):
            raise NotImplementedError(f"Triton argument {name!r} of type {kind!r}: the HAL "
                                      "launcher passes pointers and scalars only")
        params.append((name, kind))
    return params + [("global_scratch", "*i8"), ("profile_scratch", "*i8")]


class TritonLauncher:
    """Launches a compiled Triton kernel loaded through the HAL program API, in place of
    Triton's CUDA launcher (``CompiledKernel.run``); called as Triton's launcher is:
    ``(grid_x, grid_y, grid_z, stream, function, metadata, launch_metadata, enter_hook,
    exit_hook, *args)`` with every argument of the kernel's source, constexprs included.

    Args:
        binary: the triton.compile result (a CompiledKernel).
        kernel: the :class:`torch_hal.programs.Kernel` of its cubin, or None to only pack
            arguments (:meth:`pack`).

    Raises NotImplementedError for a kernel whose launch the HAL cannot express (thread block
    clusters, cooperative grids, programmatic dependent launch, tensor descriptors)."""

    def __init__(self, binary, kernel=None):
        md = binary.metadata
        refused = {"num_ctas > 1 (clusters)": getattr(md, "num_ctas", 1) != 1,
                   "launch_cooperative_grid": getattr(md, "launch_cooperative_grid", False),
                   "launch_pdl": getattr(md, "launch_pdl", False),
                   "tensor descriptors": bool(getattr(md, "tensordesc_meta", None))}
        for what, present in refused.items():
            if present:
                raise NotImplementedError(f"Triton kernel {md.name}: {what} cannot be launched "
                                          "through hal_kernel_launch")
        self.name = md.name
        self.kernel = kernel
        self.threads = md.num_warps * md.warp_size
        self.shared = md.shared
        signature = dict(binary.src.signature)
        self.arg_names = list(binary.src.fn.arg_names)
        self.parameters = triton_parameters(signature)
        self._scratch = [(md.global_scratch_size, md.global_scratch_align),
                         (md.profile_scratch_size, md.profile_scratch_align)]
        # (position in the source's arguments, Triton type) of each non-scratch parameter.
        self._args = [(self.arg_names.index(name), kind) for name, kind in self.parameters[:-2]]

    def pack(self, args, grid, device=None):
        """The launch arguments of ``args`` (every argument of the kernel's source) for a grid
        of ``grid`` blocks: tensors as they are, NULL pointers and scalars as their bytes,
        scratch buffers allocated on ``device`` where the kernel needs them (else NULL).
        Raises TypeError for an argument of the wrong kind, ValueError for a wrong count."""
        if len(args) != len(self.arg_names):
            raise ValueError(f"Triton kernel {self.name} takes {len(self.arg_names)} arguments "
                             f"({', '.join(self.arg_names)}), {len(args)} given")
        packed = []
        for position, kind in self._args:
            value = args[position]
            if kind.startswith("*"):
                if value is None:
                    packed.append(_NULL_POINTER)
                elif isinstance(value, torch.Tensor):
                    packed.append(value)
                else:
                    raise TypeError(f"Triton kernel {self.name}, argument "
                                    f"{self.arg_names[position]!r}: a pointer takes a tensor "
                                    f"or None, not {type(value).__name__}")
            else:
                packed.append(_triton_scalar_bytes(value, kind))
        blocks = grid[0] * grid[1] * grid[2]
        for size, align in self._scratch:
            if not size:
                packed.append(_NULL_POINTER)
                continue
            # The caching allocator's blocks are aligned to at least 256 bytes; the buffer is
            # freed on the launch's stream, after the launch.
            if align > 256:
                raise NotImplementedError(f"Triton kernel {self.name}: scratch alignment {align}")
            packed.append(torch.empty(blocks * size, dtype=torch.int8, device=device))
        return packed

    def __call__(self, grid_x, grid_y, grid_z, stream, function, metadata, launch_metadata,
                 enter_hook, exit_hook, *args):
        if grid_x * grid_y * grid_z == 0:
            return  # as Triton's launcher: an empty grid launches nothing
        if enter_hook is not None:
            enter_hook(launch_metadata)
        device = self.kernel.program.device_index
        packed = self.pack(args, (grid_x, grid_y, grid_z), torch.device(_C._device_type_name(),
                                                                        device))
        # stream: the id get_raw_stream gave Inductor's code (the current stream's).
        _C._kernel_launch(self.kernel._handle, device, int(stream), (grid_x, grid_y, grid_z),
                          (self.threads,), self.shared, packed)
        if exit_hook is not None:
            exit_hook(launch_metadata)


def compile_triton(fn, signature, constants, attrs, options, arch):
    """Compiles a Triton kernel to a cubin for compute capability ``arch`` (e.g. 90) without a
    GPU: an explicit GPUTarget("cuda", arch, 32). Returns triton.compile's CompiledKernel
    (``asm["cubin"]``, ``metadata``). Raises what triton.compile raises."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn, signature, constants, attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


def load_triton_binary(binary, device_index, format="cubin"):
    """Loads a compiled Triton kernel's ``format`` image ("cubin" or "ptx") on device
    ``device_index`` through the HAL and
    makes the CompiledKernel launch through it: Inductor's launcher then calls a
    :class:`TritonLauncher` where it would call Triton's CUDA launcher. Returns the binary.
    Raises RuntimeError (the HAL's message, naming the backend and the call) when the device
    refuses the cubin, NotImplementedError as TritonLauncher."""
    name = binary.metadata.name
    arch = getattr(binary.metadata.target, "arch", "?")
    image = binary.asm[format]
    try:
        program = programs.Program(image, format, device=device_index)
        kernel = program.kernel(name)
    except RuntimeError as e:
        raise RuntimeError(f"torch_hal: loading Triton kernel {name} (sm_{arch} {format}, "
                           f"{len(image)} bytes) on device {device_index}: {e}") from e
    launcher = TritonLauncher(binary, kernel)
    # What CompiledKernel._init_handles would set through Triton's driver; a module that is
    # not None keeps it from running.
    binary.module = program
    binary.function = kernel._handle
    binary._run = launcher
    binary.n_regs = binary.n_spills = None
    binary.n_max_threads = launcher.threads
    return binary


def _make_triton_plugin(device_index, arch):
    """An Inductor CachingAutotuner plugin that compiles the autotuner's kernel for ``arch`` and
    loads it through the HAL (instead of Triton's driver, which needs torch.cuda)."""
    from torch._inductor.runtime.triton_heuristics import (DEFER, CachingAutotunerPlugin,
                                                           TritonCompileResult)

    class HalTritonPlugin(CachingAutotunerPlugin):
        def pre_compile(self, autotuner):
            if autotuner.compile_results:  # compiled already (precompile is called again)
                autotuner._make_launchers()
                return True
            # One configuration, Inductor's first: choosing among several means timing them
            # with Inductor's benchmarker, which uses torch.cuda events.
            cfg = autotuner.configs[0]
            meta = autotuner._create_compile_meta(cfg)
            binary = compile_triton(autotuner.fn, meta["signature"], meta["constants"],
                                    meta["configs"][0],
                                    autotuner._create_compile_options(cfg, meta), arch)
            load_triton_binary(binary, device_index, _triton_format(device_index) or "cubin")
            autotuner.compile_results = [TritonCompileResult(binary, cfg, meta,
                                                             autotuner.inductor_meta)]
            autotuner.configs = None
            autotuner._make_launchers()
            return True  # not DEFER: the plugin compiled and made the launcher

        def pre_autotune(self, autotuner, *args, stream, **kwargs):
            del autotuner.launchers[1:]
            return DEFER

    return HalTritonPlugin()


def load_triton_kernel(name, source, device_index):
    """Loads the Triton kernel ``name`` of Inductor-generated module ``source`` (what
    ``async_compile.triton`` would load) for device ``device_index``: compiled for the
    device's compute capability and loaded through the HAL. Returns Inductor's
    CachingAutotuner; calling its ``run(*args, stream=...)`` launches on that stream.
    Raises RuntimeError when the kernel does not compile or the device refuses it."""
    from torch._inductor.codecache import PyCodeCache

    kernel = getattr(PyCodeCache.load(source), name)
    kernel._plugins = [*kernel._plugins, _make_triton_plugin(device_index,
                                                             _triton_arch(device_index))]
    kernel.precompile()
    return kernel


@dataclasses.dataclass
class _TritonDeviceProperties:
    """What Inductor's Triton code generation reads of a device (torch.cuda's names)."""

    name: str
    major: int
    minor: int
    multi_processor_count: int
    max_threads_per_multi_processor: int
    max_threads_per_block: int
    regs_per_multiprocessor: int
    warp_size: int


# cudaDeviceAttr values (CUDA runtime API, driver_types.h) of the properties above.
_CUDA_ATTRIBUTES = {"major": 75, "minor": 76, "multi_processor_count": 16,
                    "max_threads_per_multi_processor": 39, "max_threads_per_block": 1,
                    "regs_per_multiprocessor": 82, "warp_size": 10}


def _cuda_device_properties(device_index):
    """The properties of a cuda-backend device, asked of the CUDA runtime the backend loaded
    (the HAL's device properties have no compute capability). Raises RuntimeError when no
    CUDA runtime is loaded in the process or it refuses."""
    import ctypes

    props = _C._device_properties(device_index)
    path = os.environ.get("HAL_CUDA_LIBCUDART")
    names = [path] if path else [f"libcudart.so.{major}" for major in (13, 12)]
    runtime = None
    for name in names:
        try:  # RTLD_NOLOAD: the runtime the backend already loaded, never a second one
            runtime = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            break
        except OSError:
            continue
    if runtime is None:
        raise RuntimeError(f"torch_hal: no CUDA runtime ({', '.join(names)}) is loaded in this "
                           "process, so the compute capability of device "
                           f"{device_index} is unknown")
    values = {}
    for field, attribute in _CUDA_ATTRIBUTES.items():
        value = ctypes.c_int(0)
        # The HAL device index is the CUDA ordinal (hal_backends/cuda/README.md).
        err = runtime.cudaDeviceGetAttribute(ctypes.byref(value), attribute, props["index"])
        if err != 0:
            raise RuntimeError(f"torch_hal: cudaDeviceGetAttribute({attribute}) of CUDA device "
                               f"{props['index']} returned CUDA error {err}")
        values[field] = value.value
    return _TritonDeviceProperties(name=props["name"], **values)


_triton_properties = {}  # device index -> _TritonDeviceProperties


def _triton_device_properties(device_index):
    if device_index not in _triton_properties:
        _triton_properties[device_index] = _cuda_device_properties(device_index)
    return _triton_properties[device_index]


def _triton_arch(device_index):
    """The compute capability Triton kernels are compiled for on a device (e.g. 90)."""
    props = _triton_device_properties(device_index)
    return props.major * 10 + props.minor


def _triton_format(device_index=None):
    """The program format Triton kernels load as on a device ("cubin", else "ptx"), or None
    where the device runs none: it must load one of them and not be host-addressable (a
    host-addressable device runs Inductor's C++ kernels)."""
    if _C._device_properties(_get_device_index(device_index, optional=True))["host_addressable"]:
        return None
    formats = programs.formats(device_index)
    return next((f for f in ("cubin", "ptx") if f in formats), None)


def _make_triton_interface(device_type):
    """The Dynamo DeviceInterface of a device that runs Inductor's Triton kernels."""
    base = _make_interface(device_type, None)

    def properties(device=None):
        return _triton_device_properties(_get_device_index(device, optional=True))

    class Interface(base):
        class Worker(base.Worker):
            get_device_properties = staticmethod(properties)

        get_device_properties = staticmethod(properties)

        @staticmethod
        def get_compute_capability(device=None):
            props = properties(device)
            return props.major * 10 + props.minor

        @staticmethod
        def is_triton_capable(device=None):
            return True

        @staticmethod
        def raise_if_triton_unavailable(device=None):
            import triton  # noqa: F401  (ImportError says what is missing)

    Interface.__name__ = Interface.__qualname__ = base.__name__
    return Interface


def _make_triton_codegen(device_type):
    """Inductor's Triton scheduling, with each kernel defined by :func:`load_triton_kernel`
    (compiled and loaded through the HAL) instead of ``async_compile.triton``, and the Python
    wrapper of :func:`_make_codegen`."""
    from torch._inductor.codegen.common import IndentedBuffer
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.virtualized import V

    class Scheduling(TritonScheduling):
        def _emit_kernel_to_wrapper(self, wrapper, kernel, src_code, kernel_name, subs_name,
                                    node_schedule, kernel_path, get_kernel_metadata):
            # TritonScheduling._emit_kernel_to_wrapper with the definition line changed (and
            # no process pool: compiling for the device needs this process's HAL).
            if kernel.emit_kernel_override(wrapper, src_code, kernel_name, node_schedule,
                                           kernel_path, get_kernel_metadata):
                return
            index = V.graph.get_current_device_or_throw().index or 0
            body = IndentedBuffer()
            body.writeline(f"load_triton_kernel({subs_name!r}, '''")
            body.splice(src_code, strip=True)
            body.writeline(f"''', {index})")
            origins, detailed_origins = get_kernel_metadata(node_schedule, wrapper)
            comment = f"# kernel path: {kernel_path}\n{origins}\n{detailed_origins}"
            wrapper.define_kernel(kernel_name, body.getvalue(), comment)

    _, wrapper = _make_codegen(device_type)
    return Scheduling, wrapper


def _make_triton_driver(device_type):
    """Triton's driver class for the device: what Inductor asks Triton's driver while it
    generates code (the target kernels are compiled for, the current device and stream).
    Kernels are loaded and launched through the HAL, not through it."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    mod = torch.get_device_module(device_type)

    class HalTritonDriver(DriverBase):
        @classmethod
        def is_active(cls):
            return True

        def map_python_to_cpp_type(self, ty):
            raise NotImplementedError("torch_hal launches Triton kernels through the HAL")

        def get_current_target(self):
            return GPUTarget("cuda", _triton_arch(mod.current_device()), 32)

        def get_active_torch_device(self):
            return torch.device(device_type, mod.current_device())

        def get_benchmarker(self):
            raise NotImplementedError("torch_hal does not time Triton kernels (no autotuning)")

        get_current_device = staticmethod(mod.current_device)
        set_current_device = staticmethod(mod.set_device)
        get_current_stream = staticmethod(get_raw_stream)

        def get_device_interface(self):
            from torch._dynamo.device_interface import get_interface_for_device

            return get_interface_for_device(device_type)

    return HalTritonDriver


def _register_triton(device_type, properties=None):
    """Registers Inductor's Triton code generation for the device with Dynamo and Inductor
    (see :func:`register`); ``properties`` (a _TritonDeviceProperties for every device) replaces
    the CUDA runtime's answers, for compiling without a GPU. Returns the classes by name."""
    from torch._dynamo.device_interface import register_interface_for_device
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    if properties is not None:
        for index in range(torch.accelerator.device_count()):
            _triton_properties[index] = properties
    import triton

    register_interface_for_device(device_type, _make_triton_interface(device_type))
    # Process-wide: with a torch built without CUDA no other Triton driver is active. The
    # driver is also listed as a Triton backend (one that compiles for no target: the cuda
    # backend compiles), because the generated kernel modules look for an active GPU backend.
    from triton.backends import Backend

    class CompilesNothing:
        @staticmethod
        def supports_target(target):
            return False

    driver = _make_triton_driver(device_type)
    triton.backends.backends["torch_hal"] = Backend(compiler=CompilesNothing, driver=driver)
    triton.runtime.driver.set_active(driver())
    register_device_op_overrides(device_type, _make_op_overrides(device_type))
    scheduling, wrapper = _make_triton_codegen(device_type)
    return {"Scheduling": scheduling, "PythonWrapperCodegen": wrapper,
            "CppWrapperCodegen": _make_cpp_wrapper_refusal(device_type),
            "WrapperFxCodegen": WrapperFxCodegen}
