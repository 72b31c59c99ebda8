"""torch_hal: any torch-hal backend as a PyTorch device.

torch imports this package at the end of ``import torch`` (entry point group ``torch.backends``),
so scripts need no import: ``device="neuron"`` (or ``"hal"``) just works. The backend comes from
TORCH_HAL_BACKEND (default ``cpu``); PyTorch's PrivateUse1 device is renamed to the backend's
device-type name (``hal`` for cpu, ``neuron`` for trainium) and ``torch.<name>`` is registered.

If the backend cannot be opened, ``import torch`` still works: torch_hal warns once, naming the
backend and the HAL's error message, and registers nothing.
"""

import atexit
import os
import sys
import warnings

__all__ = ["backend_name", "device_type", "is_loaded", "load_error"]

# The HAL and the backend libraries this package ships (with the libnrt emulator, which the
# Trainium backend finds next to itself when no Neuron runtime is installed).
_LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")

_loaded = False
_load_error = None
_attempted = False


def _in_torchrun_launcher():
    """Whether this process is torchrun's launcher (the elastic agent), not one of its workers."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "torchrun":
        return True
    argv = list(getattr(sys, "orig_argv", sys.argv))
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
            return True
    return False


def _load():
    """Opens the backend and registers it with torch (once per process)."""
    global _loaded, _load_error, _attempted
    if _attempted:
        return _loaded
    _attempted = True
    backend = os.environ.get("TORCH_HAL_BACKEND", "cpu") or "cpu"
    # The libnrt emulator executes StableHLO programs in a Python process of its own: this
    # interpreter, whose packages (jax) are the ones installed with torch_hal.
    os.environ.setdefault("NEURON_EMU_PYTHON", sys.executable)
    try:
        import torch

        from . import _C

        ok, message, info = _C._probe_backend(backend)
        if not ok:
            raise RuntimeError(message)
        if info["exclusive_devices"] and _in_torchrun_launcher():
            # torchrun's launcher imports torch too but never uses a device; opening a backend
            # whose devices belong to one process each would take the ones its workers need.
            _load_error = (f"not loaded in the torchrun launcher: the devices of the '{backend}' "
                           "backend belong to one process each, and its worker processes need "
                           "them")
            return False
        ok, message = _C._open_backend(backend)
        if not ok:
            raise RuntimeError(message)
        _warn_if_emulated(backend)
        _C._register()
        name = _C._device_type_name()
        torch.utils.rename_privateuse1_backend(name)
        from . import device_module

        torch._register_device_module(name, device_module)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
        from . import _cpu_choices

        _cpu_choices.install(name)  # the optimizers' default implementation: the CPU's
        from . import graph_compiler

        graph_compiler.install()  # torch.compile on devices that take StableHLO programs
        from . import _after_import, _cache_key, compiler

        def on_dynamo_import(module):
            _cache_key.install()  # compiled graphs cached by another torch_hal are not reused
            compiler.register_dynamo_interface(module)

        _after_import.after_import("torch._dynamo.device_interface", on_dynamo_import)
        from . import _sharing

        _after_import.after_import("torch.multiprocessing",
                                   lambda _: _sharing.install(name, backend))
        _loaded = True
        atexit.register(_release_finished_backwards)
        _register_distributed()
    except Exception as exc:  # import torch must survive a missing or broken backend
        _load_error = f"{type(exc).__name__}: {exc}"
        warnings.warn(
            f"torch_hal: the HAL backend '{backend}' (TORCH_HAL_BACKEND) could not be loaded, "
            f"so no torch_hal device is registered: {exc}",
            RuntimeWarning,
            stacklevel=2,
        )
    return _loaded


def _warn_if_emulated(backend):
    """Warns once when the backend runs on the libnrt emulator this package bundles.

    The Trainium backend takes the bundled emulator only when it found no Neuron runtime: on a
    Trainium instance whose runtime is missing or misconfigured, a job would otherwise train on
    the emulator without anyone knowing.
    """
    if os.environ.get("HAL_NEURON_LIBNRT"):
        return  # a runtime (or the emulator) chosen by path is what the user asked for
    emulator = os.path.join(_LIB_DIR, "libnrt.so.1")
    try:  # RTLD_NOLOAD: a handle only if the backend already loaded this very file
        import ctypes

        ctypes.CDLL(emulator, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return
    warnings.warn(
        f"torch_hal: the HAL backend '{backend}' found no Neuron runtime and runs on the libnrt "
        f"emulator bundled with torch_hal ({emulator}): devices are simulated on the host and "
        "nothing runs on Trainium hardware. Install the Neuron runtime "
        "(aws-neuronx-runtime-lib, /opt/aws/neuron/lib/libnrt.so.1) or point "
        "HAL_NEURON_LIBNRT at its libnrt.so.1; HAL_NEURON_BUNDLED_LIBNRT=0 makes a missing "
        "runtime an error instead.",
        RuntimeWarning,
        stacklevel=3,
    )


def _release_finished_backwards():
    """At exit, waits until autograd's device threads have released the backwards that ran.

    A device thread releases a backward's task after backward() has returned, and the task
    holds the Python context torch stashes for every backward: released once the interpreter
    is shutting down, it aborts the process ("terminate called without an active exception").
    """
    from . import _C

    try:
        _C._release_finished_backwards()
    except Exception as exc:  # a device that fails now has failed before; the exit goes on
        warnings.warn(f"torch_hal: at exit, a backward on the '{backend_name()}' backend's "
                      f"devices failed: {exc}", RuntimeWarning, stacklevel=1)


def _register_distributed():
    """Registers the "torch_hal" c10d backend (torch_hal.distributed) for the device."""
    try:
        from . import distributed

        distributed._register()
    except Exception as exc:  # the device works without torch.distributed
        warnings.warn(f"torch_hal: the c10d backend could not be registered: {exc}",
                      RuntimeWarning, stacklevel=3)


def _autoload():
    """Entry point of the ``torch.backends`` group, called by ``import torch``."""
    _load()


def is_loaded():
    """Whether the backend was opened and registered with torch."""
    return _loaded


def load_error():
    """Why loading failed (a string), or None."""
    return _load_error


def backend_name():
    """The HAL backend in use ("cpu", "trainium", ...), or None if none was loaded."""
    if not _loaded:
        return None
    from . import _C

    return _C._backend_name()


def device_type():
    """The PyTorch device type of the backend ("hal", "neuron", ...), or None."""
    if not _loaded:
        return None
    from . import _C

    return _C._device_type_name()


_load()
