"""Device tensors sent to another process through torch.multiprocessing.

torch.multiprocessing pickles a tensor's storage as a shared-memory file descriptor, which only
CPU storages have; for a device storage the pickling failed in the sending queue's feeder thread,
the item was dropped and the receiver waited forever. Device tensors and storages are pickled
here as an error instead: the receiver's get() (or a spawned child's unpickling of its
arguments) raises it at once, and the sender is warned. The HAL's inter-process memory handles
(HAL_DEVICE_CAP_IPC) are not used for this yet.
"""

import warnings
from multiprocessing.reduction import ForkingPickler

import torch


def _raise_not_shareable(message):
    raise RuntimeError(message)


def _message(obj, device_type, backend):
    return (f"torch_hal: a {type(obj).__name__} on the {device_type} device (backend "
            f"'{backend}') cannot be sent to another process through torch.multiprocessing: "
            "torch_hal does not share device memory between processes. Send tensor.cpu() and "
            f"move it to the {device_type} device in the receiving process.")


def install(device_type, backend):
    """Wraps torch.multiprocessing's reducers of tensors and storages (the ones
    torch.multiprocessing.reductions.init_reductions registered with ForkingPickler) so that a
    device tensor or storage pickles as the error above; everything else pickles as before.
    Call it after torch.multiprocessing is imported; idempotent. Not thread-safe against
    concurrent pickling (call it at package import)."""
    for cls, reduce in list(ForkingPickler._extra_reducers.items()):
        if getattr(reduce, "_torch_hal_wrapped", False):
            continue
        if getattr(reduce, "__module__", "") != "torch.multiprocessing.reductions":
            continue
        if not (issubclass(cls, torch.Tensor) or hasattr(cls, "_share_fd_cpu_") or
                cls is torch.storage.TypedStorage or issubclass(cls, torch.storage.TypedStorage)):
            continue
        ForkingPickler.register(cls, _refusing(reduce, device_type, backend))


def _refusing(reduce, device_type, backend):
    def reduce_or_refuse(obj):
        device = getattr(obj, "device", None)
        if device is not None and torch.device(device).type == device_type:
            message = _message(obj, device_type, backend)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return (_raise_not_shareable, (message,))
        return reduce(obj)

    reduce_or_refuse._torch_hal_wrapped = True
    return reduce_or_refuse
