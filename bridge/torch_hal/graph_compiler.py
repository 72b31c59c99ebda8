"""torch.compile on devices that compile StableHLO: graphs lowered as AWS's own backend does.

A device whose backend lists the ``stablehlo`` program format (``torch_hal.programs.formats()``;
the trainium backend: compiled by neuronx-cc on hardware, executed with XLA's CPU compiler by the
libnrt emulator) and does not load host shared objects (``host_elf``, where Inductor's C++
kernels stay the default) gets torch.compile through this module, picked by the formats and never
by the device's name, so a new backend that lists ``stablehlo`` needs no change here:

* ``torch.compile(model)`` with no backend argument: graphs with an input on the device are
  handed to :func:`compile_graph` instead of Inductor (:func:`install` wraps torch's Inductor
  entry; graphs of other devices go to Inductor as before).
* ``torch.compile(model, backend="neuron")`` (the device type's name), as AWS's users write it.

:func:`compile_graph` runs AOTAutograd with PyTorch's core-ATen decompositions (random ops kept
whole), then for the forward and the backward graph: :func:`torch_hal.stablehlo.partition` splits
what torch-mlir lowers from what it cannot, each lowered region is a HAL program of format
``stablehlo`` (created once per module and device; the backend caches compiled code) launched on
the device's current stream with the region's inputs and freshly allocated outputs (from the
caching allocator), and what does not lower runs eagerly as device operators. Nothing is copied
to the host between regions. Random ops run eagerly with the device generator, so a compiled
step draws the same numbers as the eager one. Mutated inputs (optimizer state, buffers) are
results the module declares must-alias: the program writes them in place.

Each compiled function's partition is reported once: :func:`reports` and the ``torch_hal`` log
(``TORCH_LOGS=torch_hal``); :func:`compile_seconds` says how long lowering and program creation
took. Lowerings are kept on disk (``torch_hal._lowering_cache``, TORCH_HAL_STABLEHLO_CACHE) and
the backend keeps compiled programs (NEFFs; the emulator's XLA executables), so a new process
compiling the same graphs reads both back. Shapes are static, as on Neuron: the first
compilation turns off Dynamo's automatic dynamic shapes, so a new shape recompiles under
Dynamo's guards.

Requirements: torch-mlir (lowering) and, on the libnrt emulator, jax/jaxlib (its executor).
Without them torch.compile on the device behaves as it did without this module, after one
warning naming the missing package.

Environment: ``TORCH_HAL_COMPILE_STABLEHLO=0`` turns this path off (the device then has no code
generator, as before; ``backend="neuron"`` still compiles here).
"""

import logging
import os
import threading
import time
import warnings

import torch

from . import _C, programs

__all__ = ["DeviceExecutor", "compile_graph", "compile_seconds", "install", "reports",
           "supported"]

log = logging.getLogger("torch_hal")

_lock = threading.Lock()
_reports = []  # (function name, graph kind, PartitionReport)
# Seconds spent compiling: partitioning and lowering (torch-mlir, or the lowering cache) and
# creating the device's programs (the backend's compile, or its cache).
_seconds = {"lowering": 0.0, "programs": 0.0}
_executors = {}  # device index -> DeviceExecutor
_warned = set()
# Tensors one HAL launch passes (HAL_KERNEL_ARGS_MAX): larger regions run as several programs.
_MAX_TENSORS = 64


def _device_type():
    return _C._device_type_name()


def _takes_stablehlo(device_index):
    """Whether the device is one this module compiles for (by the formats it lists)."""
    formats = programs.formats(device_index)
    return "stablehlo" in formats and "host_elf" not in formats


def supported(device_index=None):
    """``(True, "")`` when graphs on the device are compiled here, else ``(False, why)``."""
    if not _takes_stablehlo(device_index):
        return False, (f"the {_device_type()} device does not take StableHLO programs, or runs "
                       "Inductor's C++ kernels")
    from . import stablehlo

    return stablehlo.is_available()


def reports():
    """``[(function, "forward" | "backward", PartitionReport)]`` of every graph compiled here:
    how many aten nodes run as device programs and which ran eagerly."""
    with _lock:
        return list(_reports)


def compile_seconds():
    """``{"lowering": s, "programs": s}``: the time this process spent partitioning and
    lowering graphs, and creating their device programs (on first use), so far."""
    with _lock:
        return dict(_seconds)


class DeviceExecutor:
    """Runs :class:`torch_hal.stablehlo.LoweredGraph` modules as HAL programs on one device."""

    def __init__(self, device_index):
        self.device_index = device_index
        self._kernels = {}  # cache key -> (Program, Kernel)

    def kernel(self, lowered):
        """The module's ``main`` on the device, created on first use."""
        entry = self._kernels.get(lowered.cache_key)
        if entry is None:
            start = time.perf_counter()
            program = programs.Program(lowered.mlir.encode(), "stablehlo",
                                       device=self.device_index)
            entry = (program, program.kernel("main"))
            self._kernels[lowered.cache_key] = entry
            with _lock:
                _seconds["programs"] += time.perf_counter() - start
        return entry[1]

    def __call__(self, lowered, inputs):
        kernel = self.kernel(lowered)
        device = torch.device(_device_type(), self.device_index)
        args, write_back = [], []
        for i, (x, spec) in enumerate(zip(inputs, lowered.input_specs)):
            if not isinstance(x, torch.Tensor):
                x = torch.tensor(x, dtype=spec.dtype)
            y = lowered.module_input(i, x)
            if y.device.type == "cpu":
                # A host input (an optimizer's learning rate, a lifted constant): converted on
                # the host, then moved from pinned memory without waiting, as a copy from
                # pageable memory would for the work queued before it.
                y = y.to(spec.dtype).contiguous().pin_memory().to(device, non_blocking=True)
            elif y.device != device:
                y = y.to(device)
            if y.dtype != spec.dtype:
                y = y.to(spec.dtype)
            if not y.is_contiguous():
                y = y.contiguous()
            if y is not x and i in lowered.mutated_inputs:
                write_back.append((x, y))
            args.append(y)
        alias_of = {r: i for i, r in lowered.aliases}
        results = [args[alias_of[r]] if r in alias_of else
                   torch.empty(spec.shape, dtype=spec.dtype, device=device)
                   for r, spec in enumerate(lowered.result_specs)]
        kernel(*args, *results)
        with torch.no_grad():
            for x, y in write_back:
                x.copy_(y)
        outs, it = [], iter(results)
        for i, spec in enumerate(lowered.output_specs):
            if spec is None:
                outs.append(None)
                continue
            r = next(it)
            r = r if r.dtype == spec.graph_dtype else r.to(spec.graph_dtype)
            outs.append(lowered.graph_output(i, r))
        return outs


def _executor(device_index):
    with _lock:
        ex = _executors.get(device_index)
        if ex is None:
            ex = _executors[device_index] = DeviceExecutor(device_index)
        return ex


def _decompositions():
    """PyTorch's core-ATen decompositions, less those of random ops: those run whole and eagerly
    with the device generator, drawing exactly what eager mode draws. Plus the ``_foreach_*``
    operators as one operator per list element, so that a compiled optimizer step lowers."""
    from torch._decomp import core_aten_decompositions

    from ._foreach_decompositions import foreach_decompositions

    decomps = dict(core_aten_decompositions())
    for op in list(decomps):
        if torch.Tag.nondeterministic_seeded in getattr(op, "tags", ()):
            del decomps[op]
    decomps.update(foreach_decompositions())
    return decomps


def _device_index(example_inputs):
    device_type = _device_type()
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == device_type:
            return x.device.index if x.device.index is not None else 0
    return torch.accelerator.current_device_index()


def _graph_compiler(name, kind, device_index):
    from torch._functorch.aot_autograd import make_boxed_func

    from . import stablehlo

    def compile_one(gm, example_inputs):
        start = time.perf_counter()
        split, report = stablehlo.partition(gm, example_inputs, executor=_executor(device_index),
                                            max_tensors=_MAX_TENSORS)
        with _lock:
            _reports.append((name, kind, report))
            _seconds["lowering"] += time.perf_counter() - start
        log.info("torch.compile %s (%s graph) on %s:%d: %s", name, kind, _device_type(),
                 device_index, report)
        return make_boxed_func(split)

    return compile_one


def compile_graph(gm, example_inputs):
    """A Dynamo backend: ``gm`` (a graph Dynamo captured) compiled for the device, as described
    at the top of this module. Returns the callable Dynamo runs in its place."""
    from torch._dynamo import config as dynamo_config
    from torch._functorch.aot_autograd import aot_module_simplified

    # Shapes are static, as on Neuron: each new shape recompiles under Dynamo's guards.
    dynamo_config.automatic_dynamic_shapes = False
    # Random ops recomputed under activation checkpointing save and replay the device's RNG
    # state (patch 0022; on a torch without it, the same at run time).
    from . import _rng_hops

    _rng_hops.install(_device_type())
    device_index = _device_index(example_inputs)
    name = getattr(gm, "_torch_hal_name", None) or gm.__class__.__name__
    with _lock:
        name = f"{name}#{len(_reports)}"
    return aot_module_simplified(
        gm, example_inputs,
        fw_compiler=_graph_compiler(name, "forward", device_index),
        bw_compiler=_graph_compiler(name, "backward", device_index),
        decompositions=_decompositions(),
        keep_inference_input_mutations=True,
    )


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _takes(example_inputs):
    """Whether a graph Dynamo hands Inductor is the device's and should be compiled here."""
    device_type = _device_type()
    if not any(isinstance(x, torch.Tensor) and x.device.type == device_type
               for x in example_inputs):
        return False
    if os.environ.get("TORCH_HAL_COMPILE_STABLEHLO", "1") == "0":
        return False
    device_index = _device_index(example_inputs)
    if not _takes_stablehlo(device_index):
        return False  # Inductor's to compile (C++ kernels) or to refuse, as without this module
    from . import stablehlo

    ok, why = stablehlo.is_available()
    if not ok:
        _warn_once(("unsupported", why),
                   f"torch_hal: torch.compile on {device_type} does not lower graphs to "
                   f"StableHLO: {why}; the graphs go to Inductor")
    return ok


_installed = False


def _register_backend_name(registry):
    device_type = _device_type()
    if device_type not in registry._COMPILER_FNS:
        registry.register_backend(compile_graph, name=device_type)


def install():
    """Routes torch.compile's default backend to :func:`compile_graph` for graphs with an input
    on the device, and registers the backend name ``<device type>`` ("neuron") with Dynamo once
    Dynamo is imported. Idempotent; cheap (neither Dynamo nor Inductor is imported: Dynamo alone
    would add about a second to every ``import torch``)."""
    global _installed
    if _installed:
        return
    _installed = True
    from . import _after_import

    _after_import.after_import("torch._dynamo.backends.registry", _register_backend_name)
    wrapper = torch._TorchCompileInductorWrapper
    inductor_call = wrapper.__call__

    def __call__(self, model_, inputs_):
        if _takes(inputs_):
            return compile_graph(model_, inputs_)
        return inductor_call(self, model_, inputs_)

    __call__.__doc__ = inductor_call.__doc__
    wrapper.__call__ = __call__
    try:  # TORCH_LOGS=torch_hal
        torch._logging._internal.register_log("torch_hal", "torch_hal")
    except Exception:  # an older torch without the registry: the logger still works
        pass
