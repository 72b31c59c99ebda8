"""torch.compile on torch_hal devices: the device's Dynamo interface and its Inductor backend.

``torch.compile(model)`` works on device tensors with no backend argument, as on CUDA: on its
first compilation for the device Inductor asks torch.<device> for its code generator classes,
and :func:`register` (called from there, so ``import torch`` does not load Inductor) registers:

* Dynamo: a ``DeviceInterface`` for the device (current device, streams, events, synchronize,
  properties), registered with ``torch._dynamo.device_interface.register_interface_for_device``.
* Inductor, on devices that load host shared objects (``host_elf`` in
  ``torch_hal.programs.formats()``; the cpu backend): ``register_backend_for_device`` with
  Inductor's own C++ scheduling and Python wrapper, changed in two places only. Each C++ kernel
  Inductor generates is compiled exactly as for the CPU (same compiler flags, vector ISA and
  OpenMP settings: the same kernel gives the same bits) together with an entry point in the HAL's
  host calling convention (``hal/include/hal/hal_program.h``), loaded with
  ``hal_program_create`` and launched with ``hal_kernel_launch`` on the device's current
  stream (:class:`HostKernel`): the generated code never waits for the device. With
  ``TORCH_HAL_COMPILE_LAUNCH=inplace``, where the device's memory is host-addressable (the cpu
  backend), the kernel is instead bound as for the CPU and runs on the calling thread once the
  current stream has done its earlier work, as the fallback runs operators
  (:class:`InPlaceKernel`). Buffers come from the device's caching allocator; operators
  Inductor does not generate (matmuls and other extern kernels) run as device operators,
  through the bridge's fallback, which orders them after pending launches.
* Inductor, on devices that load cubin (or PTX) and are not host-addressable (the cuda
  backend): Inductor's own Triton scheduling; each Triton kernel is compiled for the device's
  compute capability, loaded with ``hal_program_create`` and launched with
  ``hal_kernel_launch`` on the current stream with Triton's calling convention (the functions
  from :func:`_triton_scalar_bytes` on; not yet run on a GPU).
* Devices that take StableHLO programs (trainium: neuronx-cc on hardware, XLA's CPU compiler on
  the libnrt emulator): the Dynamo interface, and torch.compile's graphs lowered to StableHLO
  by :mod:`torch_hal.graph_compiler` instead of Inductor.
* Other devices: only the Dynamo interface, whose ``codegen_unavailable_reason()`` says why
  there is no code generator; torch 2.13.0's Inductor stops with ``KeyError: '<device>'`` on
  their graphs.

torch 2.13.0's Inductor takes any device that is not "cpu" for a GPU in places; the settings
this needs are in :func:`_configure_inductor` (bridge/README.md, "torch.compile").

Environment: ``TORCHINDUCTOR_*`` variables work as for the CPU (cache directory, threads);
``TORCH_HAL_COMPILE_LAUNCH``: ``stream`` (the default) or ``inplace`` (see above).
"""

import dataclasses
import os
import warnings

import torch

from . import _C, programs
from ._utils import _get_device_index

__all__ = ["HostKernel", "InPlaceKernel", "load_host_kernel", "get_raw_stream",
           "TritonLauncher", "compile_triton", "load_triton_binary", "load_triton_kernel",
           "triton_parameters"]

# The entry point a generated kernel gets when it has no name of its own (its name is
# Inductor's kernel name, which torch.profiler then shows), and its argument signature.
_ENTRY = "torch_hal_kernel"
_ENTRY_NAME_MAX = 200  # HAL_KERNEL_NAME_MAX (256), less "hal_signature_" and room to spare

_ENTRY_PREAMBLE = r"""
// torch_hal: the kernel above as a HAL host kernel (hal/include/hal/hal_program.h).
#include <exception>
#include <type_traits>
#include "hal/hal_program.h"
template <typename T> constexpr char torch_hal_signature_letter() {
    return std::is_pointer<T>::value ? 'p' : sizeof(T) == 16 ? 'x' : char('0' + sizeof(T));
}
"""


def _entry_name(name):
    """The entry point's name: ``name`` (Inductor's kernel name) where it is a short C
    identifier, else the default."""
    if name and len(name) <= _ENTRY_NAME_MAX and name.isidentifier() and name.isascii():
        return name
    return _ENTRY


def _entry_source(arg_types, entry=_ENTRY):
    """C++ of the HAL entry point ``entry`` that unpacks the launch's arguments and calls
    ``kernel``."""
    letters = "".join(f"torch_hal_signature_letter<{t}>(), " for t in arg_types)
    unpack = []
    for i, t in enumerate(arg_types):
        if t.rstrip().endswith("*"):  # args[i] points to a void * holding the pointer
            unpack.append(f"*reinterpret_cast<{t} const *>(args[{i}])")
        else:  # args[i] points to the scalar's bytes
            unpack.append(f"*reinterpret_cast<const std::remove_cv_t<{t}> *>(args[{i}])")
    call = ", ".join(unpack)
    return _ENTRY_PREAMBLE + f"""
extern "C" __attribute__((visibility("default")))
const char hal_signature_{entry}[] = {{ {letters}'\\0' }};
extern "C" __attribute__((visibility("default")))
hal_status_t {entry}(const hal_host_kernel_ctx_t *ctx, void *const *args)
{{
    (void)args;
    try {{  // Inductor's checks (index bounds, integer division) throw: report them
        kernel({call});
    }} catch (const std::exception &e) {{
        ctx->set_error("torch.compile kernel: %s", e.what());
        return HAL_ERROR_INVALID_ARGUMENT;
    }} catch (...) {{
        ctx->set_error("torch.compile kernel: an exception of unknown type");
        return HAL_ERROR_INTERNAL;
    }}
    return HAL_OK;
}}
"""


class _Image:
    """A compiled host shared object's bytes (what the code cache "loads")."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = f.read()


_kernel_cache = None


def _code_cache():
    """Inductor's C++ code cache, keeping the built image's bytes instead of dlopen-ing it."""
    global _kernel_cache
    if _kernel_cache is None:
        from torch._inductor.codecache import CppCodeCache
        from torch._inductor.utils import clear_on_fresh_cache

        @clear_on_fresh_cache
        class HostKernelCodeCache(CppCodeCache):
            cache = {}
            cache_clear = staticmethod(cache.clear)

            @staticmethod
            def _load_library_inner(path, key):
                return _Image(path)

        _kernel_cache = HostKernelCodeCache
    return _kernel_cache


class HostKernel:
    """A kernel Inductor generated, loaded on one device; calling it enqueues a launch of one
    block on the device's current stream (the kernel parallelises inside, as on the CPU)."""

    __slots__ = ("program", "kernel", "device_index", "_handle")

    def __init__(self, image, device_index, entry=_ENTRY):
        self.program = programs.Program(image, "host_elf", device=device_index)
        self.kernel = self.program.kernel(entry)
        self.device_index = device_index
        self._handle = self.kernel._handle

    def __call__(self, *args):
        # Kernel.__call__ without its checks: the program lives as long as this object, and
        # the generated code passes tensors of the graph's device.
        _C._kernel_launch(self._handle, self.device_index, -1, (1,), (1,), 0, args)


class InPlaceKernel:
    """A kernel Inductor generated, for a device whose memory the host addresses (the cpu
    backend): built and bound exactly as for plain CPU tensors (Inductor's Python binding of
    the same source, so the same shared object), and run on the calling thread once the
    device's current stream has done its earlier work, as the fallback runs CPU operators.

    Used with TORCH_HAL_COMPILE_LAUNCH=inplace. What it saves: a stream launch hands each kernel
    to the stream's worker thread and the next fallback operator (a matmul, the optimizer)
    waits for that thread, so every kernel costs two thread wake-ups, and on a loaded host each
    waits for a CPU (examples/bench_step_time.py measures both). What it gives up: the launch
    is no longer enqueue-only (the calling thread waits for the stream, then runs the kernel).
    A failing kernel (Inductor's index-bounds checks) raises RuntimeError from the call."""

    __slots__ = ("_run", "device_index")

    def __init__(self, arg_types, source, device_index):
        from torch._inductor.codecache import CppPythonBindingsCodeCache

        self._run = CppPythonBindingsCodeCache.load_pybinding(arg_types, source,
                                                              device_type="cpu")
        self.device_index = device_index

    def __call__(self, *args):
        torch.accelerator.current_stream(self.device_index).synchronize()
        self._run(*args)


_LAUNCH_MODES = ("stream", "inplace")


def _runs_in_place(device_index):
    """Whether the device's kernels run on the calling thread (:class:`InPlaceKernel`): where
    TORCH_HAL_COMPILE_LAUNCH=inplace asks for it and the device's memory is host-addressable;
    otherwise they are launched on the stream (:class:`HostKernel`). Raises ValueError naming
    the variable for a value other than ``stream``, ``inplace`` or empty."""
    mode = os.environ.get("TORCH_HAL_COMPILE_LAUNCH", "") or "stream"
    if mode not in _LAUNCH_MODES:
        raise ValueError(f"TORCH_HAL_COMPILE_LAUNCH={mode!r}: expected one of "
                         f"{', '.join(_LAUNCH_MODES)}")
    if mode == "stream":
        return False
    return bool(_C._device_properties(device_index)["host_addressable"])


def load_host_kernel(arg_types, source, device_index, name=None):
    """Compiles Inductor C++ kernel source (its function named ``kernel``, taking arguments of
    the C++ types ``arg_types``) for the host and makes it callable on device ``device_index``.
    ``name`` (Inductor's kernel name) names the program's entry point, as the device's
    profiler rows show it.

    Returns a :class:`HostKernel` loaded on the device, or an :class:`InPlaceKernel` where
    TORCH_HAL_COMPILE_LAUNCH=inplace and the device's memory is host-addressable (see
    :func:`_runs_in_place`). Raises RuntimeError (the compiler's output, or the HAL's message
    naming the backend and the call) when the source does not build or load, ValueError for
    an unknown TORCH_HAL_COMPILE_LAUNCH."""
    if _runs_in_place(device_index):
        return InPlaceKernel(arg_types, source, device_index)
    include = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
    entry = _entry_name(name)
    code = source + _entry_source(arg_types, entry)
    image = _code_cache().load(code, device_type="cpu", extra_flags=(f"-I{include}",))
    return HostKernel(image.data, device_index, entry)


def get_raw_stream(device_index):
    """The id of the current stream of a device (what Inductor's generated code asks for)."""
    return torch.accelerator.current_stream(device_index).stream_id


@dataclasses.dataclass
class _CompileProperties:
    """What Inductor reads of a device: how many threads its kernels may use."""

    multi_processor_count: int


def _make_interface(device_type, reason):
    """The Dynamo DeviceInterface of the torch_hal device."""
    from torch._dynamo.device_interface import DeviceInterface

    mod = torch.get_device_module(device_type)

    def properties(device=None):
        return _CompileProperties(torch.get_num_threads())

    class Interface(DeviceInterface):
        Stream = mod.Stream

        class Event(torch.Event):
            def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
                return mod.Event(enable_timing=enable_timing, blocking=blocking)

        class Worker:
            @staticmethod
            def set_device(device):
                mod.set_device(device)

            @staticmethod
            def current_device():
                return mod.current_device()

            get_device_properties = staticmethod(properties)

        current_device = staticmethod(mod.current_device)
        set_device = staticmethod(mod.set_device)
        device_count = staticmethod(mod.device_count)
        is_available = staticmethod(mod.is_available)
        synchronize = staticmethod(mod.synchronize)
        current_stream = staticmethod(mod.current_stream)
        set_stream = staticmethod(mod.set_stream)
        get_raw_stream = staticmethod(get_raw_stream)
        get_device_properties = staticmethod(properties)

        @staticmethod
        def stream(stream):
            return mod.stream(stream)

        @staticmethod
        def maybe_exchange_device(device):
            previous = mod.current_device()
            if device >= 0 and device != previous:
                mod.set_device(device)
            return previous

        exchange_device = maybe_exchange_device

        @staticmethod
        def get_compute_capability(device=None):
            return ""

        @staticmethod
        def is_bf16_supported(including_emulation=False):
            return True

        @staticmethod
        def memory_allocated(device=None):
            return mod.memory_allocated(device)

        @staticmethod
        def is_triton_capable(device=None):
            return False

        @staticmethod
        def raise_if_triton_unavailable(device=None):
            raise RuntimeError(f"torch_hal: the {device_type} device does not run Triton kernels")

        @staticmethod
        def codegen_unavailable_reason():
            """Why Inductor cannot generate code for the device, or None."""
            return reason

    Interface.__name__ = Interface.__qualname__ = f"{device_type.capitalize()}Interface"
    return Interface


def _make_op_overrides(device_type):
    from torch._inductor.codegen.common import DeviceOpOverrides

    class OpOverrides(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name):
            return f"from torch_hal.compiler import get_raw_stream as {name}"

        def set_device(self, device_idx):
            return f"torch.{device_type}.set_device({device_idx})"

        def synchronize(self):
            return f"torch.{device_type}.synchronize()"

        def device_guard(self, device_idx):
            return f"torch.{device_type}.device({device_idx})"

    return OpOverrides()


def _make_codegen(device_type):
    """Inductor's C++ scheduling and Python wrapper, with kernels defined and launched through
    the HAL program API."""
    from torch._inductor import config
    from torch._inductor.codegen.common import IndentedBuffer
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
    from torch._inductor.utils import Placeholder, get_fused_kernel_name
    from torch._inductor.virtualized import V

    class Scheduling(CppScheduling):
        def define_kernel(self, src_code, nodes, kernel_args=None):
            # CppScheduling.define_kernel with the definition line changed: the kernel is
            # compiled and loaded on the device instead of bound into Python.
            wrapper = V.graph.wrapper_code
            if src_code in wrapper.src_to_kernel:
                return wrapper.src_to_kernel[src_code]
            fused_name = (get_fused_kernel_name(nodes, config.cpp.descriptive_names)
                          if config.cpp.descriptive_names else "")
            kernel_name = "_".join(["cpp", fused_name, wrapper.next_kernel_suffix()])
            wrapper.src_to_kernel[src_code] = kernel_name
            src_code = src_code.replace(str(Placeholder.KERNEL_NAME), "kernel")
            src_code = src_code.replace(str(Placeholder.DESCRIPTIVE_NAME), kernel_name)
            src_code = src_code.replace("#pragma CMT", "//")
            args = self.kernel_group.args if kernel_args is None else kernel_args
            _, _, arg_types = args.cpp_argdefs()
            index = V.graph.get_current_device_or_throw().index or 0
            body = IndentedBuffer()
            body.writeline(f"load_host_kernel({arg_types!r}, r'''")
            body.splice(src_code, strip=True)
            body.writeline(f"''', {index}, {kernel_name!r})")
            wrapper.define_kernel(kernel_name, body.getvalue(), gpu=False)
            return kernel_name

    class WrapperMixin:
        def write_header(self):
            super().write_header()
            self.imports.writeline(
                "from torch_hal.compiler import load_host_kernel, load_triton_kernel")

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None,
                                         triton=True, **kwargs):
            device = device or V.graph.get_current_device_or_throw()
            if not triton and device.type == device_type:
                # A HostKernel: the call enqueues the launch on the current stream.
                self.writeline(self.wrap_kernel_call(kernel_name, call_args))
                return
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                                 triton=triton, **kwargs)

        def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None,
                            is_pinned=False):
            if device.type != device_type:
                return super().make_allocation(name, device, dtype, shape, stride,
                                               allocation_shape, is_pinned)
            # The generic line names the device type only ("hal"), which is the *current*
            # device at run time; name the graph's device.
            allocation_shape = shape if allocation_shape is None else allocation_shape
            shape_s = self.codegen_python_shape_tuple(shape)
            alloc_s = self.codegen_python_shape_tuple(allocation_shape)
            stride_s = self.codegen_python_shape_tuple(stride)
            out = f"{name} = empty_strided({alloc_s}, {stride_s}, device='{device}', dtype={dtype})"
            if shape_s != alloc_s:
                out += f".as_strided({shape_s}, {stride_s})"
            return out

    class SubgraphWrapper(WrapperMixin, SubgraphPythonWrapperCodegen):
        pass

    class Wrapper(WrapperMixin, PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return SubgraphWrapper(subgraph_name, parent_wrapper, partition_signatures)
            return Wrapper()

    return Scheduling, Wrapper


def _reason(device_type):
    formats = programs.formats()
    if "stablehlo" in formats:
        return (f"Inductor generates no kernels for the {device_type} device: torch.compile "
                "lowers its graphs to StableHLO programs instead (torch_hal.graph_compiler; "
                "TORCH_HAL_COMPILE_STABLEHLO=0 turns that off), which its backend compiles to "
                "NEFF with neuronx-cc or executes on the libnrt emulator")
    if "neff" in formats:
        return (f"the {device_type} device runs NEFF programs and torch_hal has no NEFF "
                "compiler (neuronx-cc) to turn Inductor's graphs into them")
    return (f"the {device_type} device loads {', '.join(formats) or 'no programs'}, and "
            "torch_hal generates host shared objects (host_elf) only")


_registered = None  # {"classes": the Inductor classes, or None: the device generates none}


def register_dynamo_interface(_module=None):
    """Registers the device's Dynamo DeviceInterface alone: the one :func:`register` registers,
    without Inductor. torch_hal calls it as soon as ``torch._dynamo.device_interface`` is
    imported (``_after_import``), so Dynamo finds the device before its first compilation for
    it (``get_interface_for_device`` raised "No interface for device" until then). Idempotent."""
    from torch._dynamo.device_interface import register_interface_for_device

    device_type = _C._device_type_name()
    generates = "host_elf" in programs.formats()
    if not generates and _triton_format() is not None:
        interface = _make_triton_interface(device_type)
    else:
        interface = _make_interface(device_type, None if generates else _reason(device_type))
    register_interface_for_device(device_type, interface)


def register():
    """Registers the device with Dynamo and, where it loads host shared objects or (not
    host-addressable) cubin, with Inductor: C++ or Triton kernels.

    Idempotent. Inductor calls it on its first compilation for the device (it asks the device
    module for ``Scheduling``, ``PythonWrapperCodegen``, ``CppWrapperCodegen`` and
    ``WrapperFxCodegen``, which torch.<device> answers through this), so ``import torch`` stays
    as fast as without torch.compile; call it earlier for Dynamo's device interface alone.
    Returns those classes by name, or None for a device Inductor cannot generate code for.
    Raises RuntimeError for a torch whose Inductor cannot serve the device (see
    :func:`_configure_inductor`)."""
    global _registered
    if _registered is not None:
        return _registered.get("classes")
    from torch._inductor.codegen.common import register_device_op_overrides
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    device_type = _C._device_type_name()
    generates = "host_elf" in programs.formats()
    if not generates and _triton_format() is not None:
        _registered = {"classes": _register_triton(device_type)}
        return _registered["classes"]
    register_dynamo_interface()
    classes = None
    if generates:
        _configure_inductor(device_type)  # first: it refuses a torch it cannot serve
        register_device_op_overrides(device_type, _make_op_overrides(device_type))
        scheduling, wrapper = _make_codegen(device_type)
        classes = {"Scheduling": scheduling, "PythonWrapperCodegen": wrapper,
                   "CppWrapperCodegen": _make_cpp_wrapper_refusal(device_type),
                   "WrapperFxCodegen": WrapperFxCodegen}
    _registered = {"classes": classes}
    return classes


def _make_cpp_wrapper_refusal(device_type):
    """Inductor's C++ wrapper mode (config.cpp_wrapper) is not supported for the device."""

    class CppWrapperCodegen:
        @staticmethod
        def create(*args, **kwargs):
            raise NotImplementedError(
                f"torch_hal: Inductor's C++ wrapper (torch._inductor.config.cpp_wrapper) is not "
                f"supported on the {device_type} device; its Python wrapper is")

    return CppWrapperCodegen


def _configure_inductor(device_type):
    """Settings torch 2.13.0's Inductor needs before it generates C++ for a device that is not
    "cpu", made only where the patch series (patches/) does not fix the code. Two pieces of it
    take every such device for a GPU with a Triton backend:

    * utils.get_current_backend() answers config.cuda_backend ("triton") for any device other
      than cpu, mps, xpu and tpu, and the C++ kernels then miss the dtypes the "cpp" backend
      tracks (patch 0015 asks the device's Scheduling). Without the patch, on a torch built
      without CUDA config.cuda_backend serves no other device, so it is set to "cpp"; on a
      CUDA build it is left alone and the device is not registered with Inductor
      (RuntimeError, which torch_hal reports as a warning).
    * the scheduler applies three loop transformations (reordering, reindexing, index
      inversion) to every device that is not "cpu" and fails on C++ kernels' loop groups
      (patch 0016 skips them for C++ kernels on any device). Without the patch they are turned
      off: they never apply to CPU graphs, and only GPU graphs lose them.
    """
    from torch._inductor import config, scheduler, utils

    if not hasattr(utils, "_registered_backend"):  # patch 0015
        if torch.backends.cuda.is_built():
            raise RuntimeError(
                f"torch {torch.__version__} is built with CUDA, and its Inductor picks Triton "
                f"(config.cuda_backend) as the code generator of the {device_type} device: "
                f"torch.compile on {device_type} needs a torch built without CUDA, or the "
                f"torch-hal patch series (patches/0015)")
        config.cuda_backend = "cpp"
    if not hasattr(scheduler.Scheduler, "_generates_cpp"):  # patch 0016
        config.loop_ordering_after_fusion = False
        config.loop_reindexing_after_fusion = False
        config.loop_index_inversion_in_fusion = False


# ---- Triton kernels on devices that load cubin (the cuda backend) ---------------------------
#
# Inductor's own Triton scheduling generates the kernels; each is compiled by the triton package
# to a cubin for the device's compute capability (an explicit GPUTarget: neither Triton's CUDA
# driver nor torch.cuda is used), loaded with hal_program_create (torch_hal.programs) and
# launched with hal_kernel_launch on the stream Inductor's code passes (the device's current
# stream), with Triton's calling convention: the kernel's arguments without its constexprs,
# then the global and profile scratch pointers Triton appends to every kernel.

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
