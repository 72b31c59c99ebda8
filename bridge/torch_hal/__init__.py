"""torch_hal: any torch-hal backend as a PyTorch device.

torch imports this package at the end of ``import torch`` (entry point group ``torch.backends``),
so scripts need no import: ``device="neuron"`` (or ``"hal"``) just works. The backend comes from
TORCH_HAL_BACKEND (default ``cpu``); PyTorch's PrivateUse1 device is renamed to the backend's
device-type name (``hal`` for cpu, ``neuron`` for trainium) and ``torch.<name>`` is registered.

If the backend cannot be opened, ``import torch`` still works: torch_hal warns once, naming the
backend and the HAL's error message, and registers nothing.
"""

import os
import sys
import warnings

__all__ = ["backend_name", "device_type", "is_loaded", "load_error"]

_LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")

_loaded = False
_load_error = None
_attempted = False


# Backends whose devices belong to one process at a time (the Neuron runtime takes its
# NeuronCores exclusively when it starts, which is when the backend opens).
_EXCLUSIVE_BACKENDS = {"trainium"}


def _in_torchrun_launcher():
    """Whether this process is torchrun's launcher (the elastic agent), not one of its workers."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == "torchrun":
        return True
    argv = list(getattr(sys, "orig_argv", sys.argv))
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in ("torch.distributed.run", "torch.distributed.launch"):
            return True
    return False


def _claim_neuron_cores():
    """Under torchrun, gives each local rank its own NeuronCore, before the runtime starts.

    The Neuron runtime takes the cores named by NEURON_RT_VISIBLE_CORES (or NEURON_RT_NUM_CORES,
    or else all of them) exclusively when it initialises, which is when torch_hal opens the
    backend at ``import torch``. With several ranks per host each process must ask for its own
    cores, as Neuron users do: when LOCAL_RANK and WORLD_SIZE are set (torchrun) and neither
    variable is, NEURON_RT_VISIBLE_CORES=<LOCAL_RANK>. The rank then sees one device, index 0.
    """
    if os.environ.get("NEURON_RT_VISIBLE_CORES") or os.environ.get("NEURON_RT_NUM_CORES"):
        return
    local_rank = os.environ.get("LOCAL_RANK", "")
    if local_rank.isdigit() and os.environ.get("WORLD_SIZE"):
        os.environ["NEURON_RT_VISIBLE_CORES"] = str(int(local_rank))


def _prepare_environment(backend):
    """Sets what the backend reads when it starts: NeuronCores per rank, the libnrt emulator."""
    if backend == "trainium":
        _claim_neuron_cores()
    _use_neuron_emulator_if_needed(backend)


def _use_neuron_emulator_if_needed(backend):
    """Points the Trainium backend at the bundled libnrt emulator when no Neuron runtime exists.

    The backend looks for libnrt.so.1 in $HAL_NEURON_LIBNRT, then where aws-neuronx-runtime-lib
    installs it, then on the loader path. When none of those has it and this package carries the
    emulator, use the emulator (TORCH_HAL_NEURON_EMULATOR=0 turns this off).
    """
    if backend != "trainium" or os.environ.get("HAL_NEURON_LIBNRT"):
        return
    if os.environ.get("TORCH_HAL_NEURON_EMULATOR", "1") == "0":
        return
    if os.path.exists("/opt/aws/neuron/lib/libnrt.so.1"):
        return
    import ctypes.util

    if ctypes.util.find_library("nrt"):
        return
    emulator = os.path.join(_LIB_DIR, "libnrt.so.1")
    if os.path.exists(emulator):
        os.environ["HAL_NEURON_LIBNRT"] = emulator


def _load():
    """Opens the backend and registers it with torch (once per process)."""
    global _loaded, _load_error, _attempted
    if _attempted:
        return _loaded
    _attempted = True
    backend = os.environ.get("TORCH_HAL_BACKEND", "cpu") or "cpu"
    if backend in _EXCLUSIVE_BACKENDS and _in_torchrun_launcher() and not (
            os.environ.get("NEURON_RT_VISIBLE_CORES") or os.environ.get("NEURON_RT_NUM_CORES")):
        # torchrun's launcher imports torch too; opening the backend there would take every
        # NeuronCore and leave none for the ranks it starts. It does not use the device.
        _load_error = (f"not loaded in the torchrun launcher: the '{backend}' backend would take "
                       "the devices its worker processes need")
        return False
    try:
        import torch

        _prepare_environment(backend)
        from . import _C

        ok, message = _C._open_backend(backend)
        if not ok:
            raise RuntimeError(message)
        _C._register()
        name = _C._device_type_name()
        torch.utils.rename_privateuse1_backend(name)
        from . import device_module

        torch._register_device_module(name, device_module)
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
        _loaded = True
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
