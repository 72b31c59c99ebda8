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
  stream (:class:`HostKernel`): the generated code never waits for the device. Where the
  device's memory is host-addressable (the cpu backend) this is what
  ``TORCH_HAL_COMPILE_LAUNCH=stream`` asks for; by default such a device's kernel is bound as
  for the CPU and runs on the calling thread once the current stream has done its earlier work,
  as the fallback runs operators (:class:`InPlaceKernel`). Buffers come from the device's
  caching allocator; operators Inductor does not generate (matmuls and other extern kernels)
  run as device operators, through the bridge's fallback, which orders them after pending
  launches.
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
``TORCH_HAL_COMPILE_LAUNCH``: ``inplace`` (the default; it applies where the device's memory
is host-addressable) or ``stream`` (HAL program launches on every device; see above).
"""

import dataclasses
import functools
import os

import torch

from . import _C, programs

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

    The default on such devices (TORCH_HAL_COMPILE_LAUNCH=stream launches them on the stream
    instead). What it saves: a stream launch hands each kernel to the stream's worker thread
    and the next fallback operator (a matmul, the optimizer) waits for that thread, so every
    kernel costs two thread wake-ups, and on a loaded host each waits for a CPU
    (examples/bench_step_time.py measures both). What it gives up: the launch is no longer
    enqueue-only (the calling thread waits for the stream, then runs the kernel). A failing
    kernel (Inductor's index-bounds checks) raises RuntimeError from the call. torch.profiler
    shows each run as a kernel row named ``name`` on the current stream, timed on the host."""

    __slots__ = ("_run", "device_index", "name")

    def __init__(self, arg_types, source, device_index, name=None):
        from torch._inductor.codecache import CppPythonBindingsCodeCache

        self._run = CppPythonBindingsCodeCache.load_pybinding(arg_types, source,
                                                              device_type="cpu")
        self.device_index = device_index
        self.name = _entry_name(name)

    def __call__(self, *args):
        torch.accelerator.current_stream(self.device_index).synchronize()
        if not _C._device_activity_recording():
            self._run(*args)
            return
        start = _C._device_activity_now()
        self._run(*args)
        _C._record_in_place_kernel(self.name, self.device_index, start,
                                   _C._device_activity_now())


_LAUNCH_MODES = ("stream", "inplace")


def _runs_in_place(device_index):
    """Whether the device's kernels run on the calling thread (:class:`InPlaceKernel`): where
    the device's memory is host-addressable, unless TORCH_HAL_COMPILE_LAUNCH=stream; otherwise
    they are launched on the stream (:class:`HostKernel`). Raises ValueError naming the
    variable for a value other than ``stream``, ``inplace`` or empty."""
    mode = os.environ.get("TORCH_HAL_COMPILE_LAUNCH", "") or "inplace"
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

    Returns an :class:`InPlaceKernel` where the device's memory is host-addressable (unless
    TORCH_HAL_COMPILE_LAUNCH=stream; see :func:`_runs_in_place`), else a :class:`HostKernel`
    loaded on the device. Raises RuntimeError (the compiler's output, or the HAL's message
    naming the backend and the call) when the source does not build or load, ValueError for
    an unknown TORCH_HAL_COMPILE_LAUNCH."""
    if _runs_in_place(device_index):
        return InPlaceKernel(arg_types, source, device_index, name)
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
            self.imports.writeline("from torch_hal._C import _empty_strided as hal_empty_strided")

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
            # The generic line (torch.empty_strided, about 2 us a buffer) names the device type
            # only ("hal"), which is the *current* device at run time. The device's own
            # allocation, as Inductor's empty_strided_cpu/_cuda for its devices, on the
            # graph's device.
            allocation_shape = shape if allocation_shape is None else allocation_shape
            shape_s = self.codegen_python_shape_tuple(shape)
            alloc_s = self.codegen_python_shape_tuple(allocation_shape)
            stride_s = self.codegen_python_shape_tuple(stride)
            out = f"{name} = hal_empty_strided({alloc_s}, {stride_s}, {dtype}, {device.index or 0})"
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

    return _answer_cpp_while_generating(Scheduling), Wrapper


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
        _configure_inductor(device_type)
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
    """Settings Inductor (torch 2.13.0 and 2.14.1) needs before it generates C++ for a device
    that is not "cpu", made only where the patch series (patches/) does not fix the code. Two
    pieces of it take every such device for a GPU with a Triton backend:

    * utils.get_current_backend() answers config.cuda_backend ("triton") for any device other
      than cpu, mps, xpu and tpu, and the C++ kernels then miss the dtypes the "cpp" backend
      tracks (patch 0015 asks the kernel_language the Scheduling declares). Without it, the
      Scheduling (see :func:`_answer_cpp_while_generating`) sets config.cuda_backend to "cpp"
      while it generates the device's kernels and restores it after, so a CUDA build's GPU
      graphs keep Triton.
    * the scheduler applies three loop transformations (reordering, reindexing, index
      inversion) to every device that is not "cpu" and fails on C++ kernels' loop groups
      (patch 0016 skips them for C++ kernels on any device). Without the patch they are turned
      off: they never apply to CPU graphs, and only GPU graphs lose them.
    """
    from torch._inductor import config, scheduler

    if not hasattr(scheduler, "_generates_cpp_kernels"):  # patch 0016
        config.loop_ordering_after_fusion = False
        config.loop_reindexing_after_fusion = False
        config.loop_index_inversion_in_fusion = False


def _answer_cpp_while_generating(scheduling_cls):
    """Makes every public method of ``scheduling_cls`` (the device's Inductor Scheduling) run
    with config.cuda_backend set to "cpp", restored on return, unless patch 0015 lets
    utils.get_current_backend() ask the Scheduling itself. The scheduler generates a kernel's
    code only inside these methods, so the device's C++ kernels see the "cpp" backend while
    a CUDA build's own GPU graphs keep Triton. Not for concurrent compilations in two threads
    (Inductor's config is process-wide; its own code generation runs in one thread).
    Returns ``scheduling_cls``."""
    import inspect

    from torch._inductor import config, utils

    if hasattr(utils, "_registered_kernel_language"):  # patch 0015
        return scheduling_cls

    def answering_cpp(method):
        def call(*args, **kwargs):
            saved = config.cuda_backend
            if saved == "cpp":
                return method(*args, **kwargs)
            config.cuda_backend = "cpp"
            try:
                return method(*args, **kwargs)
            finally:
                config.cuda_backend = saved

        return functools.wraps(method)(call)

    for name in dir(scheduling_cls):
        value = inspect.getattr_static(scheduling_cls, name)
        if not name.startswith("_") and inspect.isfunction(value):
            setattr(scheduling_cls, name, answering_cpp(value))
    return scheduling_cls


# Triton kernels on devices that load cubin (compiler_triton.py), imported last: it uses the
# factories above. Re-exported: generated code imports load_triton_kernel from here.
from .compiler_triton import (_TritonDeviceProperties, TritonLauncher,  # noqa: E402,F401
                              _cuda_device_properties, _make_triton_interface,
                              _register_triton, _triton_format, _triton_scalar_bytes,
                              compile_triton, load_triton_binary, load_triton_kernel,
                              triton_parameters)
