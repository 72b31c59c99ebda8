"""torch.distributed over the HAL's collectives: the c10d backend ``"torch_hal"``.

torch_hal registers the backend when it loads (at ``import torch``)::

    torch.distributed.Backend.register_backend(
        "torch_hal", _create_backend, extended_api=True, devices=[<device>])

so it is the default backend of the torch_hal device (``hal``, ``neuron``): under torchrun,
``dist.init_process_group()`` with no backend argument uses it, exactly as it picks NCCL for
CUDA. How torch 2.13 decides: without a backend (or ``device_id``), ``BackendConfig`` asks
``torch._C._get_accelerator()`` for the accelerator (the torch_hal device) and maps only that
device to ``Backend.default_device_backend_map[<device>]``; with ``device_id=torch.device(
"<device>", i)`` it takes the same map entry. As for CUDA, the default group then serves device
tensors only: object collectives (``all_gather_object``, ...) run on the device, and CPU
tensors need a CPU backend named explicitly, ``init_process_group("cpu:gloo,<device>:torch_hal")``
(or ``dist.new_group(backend="gloo")``).

What the backend does (csrc/distributed/ProcessGroupHAL.h has the details):

* One HAL communicator per process group, created at its first collective on the device of
  that collective's tensors (set the rank's device first: ``torch.accelerator.
  set_device_index(local_rank)``). Rank 0 makes the HAL unique id and publishes it in the
  process group's store; all ranks join through that store. The process group's ``timeout`` is
  the communicator's timeout: a dead or stuck peer makes the collective fail on every other
  rank within it (``HAL_ERROR_REMOTE`` / ``HAL_ERROR_TIMEOUT``), never a hang.
* Collectives run on a communication stream of the device that waits for the current stream;
  their tensors are recorded on it (``record_stream``). ``Work.wait()`` makes the current stream
  wait for the collective and returns once it finished, raising
  ``torch.distributed.DistBackendError`` with the HAL status and message if it failed
  (``Work.wait(timeout)`` bounds the wait and aborts the communicator when it passes).
  ``Work.get_future()`` is completed with the communication stream's event, as CUDA futures are
  (DDP's gradient buckets use it).
* allreduce (SUM, PRODUCT, MIN, MAX, AVG; bool as logical or/and; complex SUM/AVG), broadcast,
  reduce, all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor,
  all_to_all and all_to_all_single (equal or unequal splits: unequal ones are one HAL group of
  sends and receives), gather, scatter, send/recv, barrier, and the coalesced forms
  (``_coalescing_manager``, ``batch_isend_irecv``, ``all_reduce_coalesced``) as HAL groups.
  Not supported, with a clear error: ``ReduceOp.PREMUL_SUM``, bitwise reductions, sparse
  tensors, ``recv`` from any source.
"""

import datetime

import torch

from . import _C

__all__ = ["BACKEND_NAME", "is_registered"]

BACKEND_NAME = "torch_hal"

_registered = False


def _timeout_ms(timeout):
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    else:  # a number of seconds
        seconds = float(timeout)
    return max(1, int(seconds * 1000))


def _create_backend(dist_options, backend_options=None):
    """The creator torch.distributed calls (extended API): returns a ProcessGroupHAL."""
    del backend_options  # no backend-specific options yet
    return _C.ProcessGroupHAL(
        dist_options.store,
        dist_options.group_rank,
        dist_options.group_size,
        _timeout_ms(dist_options.timeout),
        dist_options.group_id or "",
        # the group's ranks in the default group (empty for the default group): torch.profiler
        list(getattr(dist_options, "global_ranks_in_group", None) or []),
    )


def _register():
    """Registers the backend for the torch_hal device (called when torch_hal loads)."""
    global _registered
    if _registered:
        return True
    import torch.distributed as dist

    if not dist.is_available():
        return False
    _C._init_distributed()
    device = _C._device_type_name()
    dist.Backend.register_backend(
        BACKEND_NAME, _create_backend, extended_api=True, devices=[device]
    )
    _registered = True
    return True


def is_registered():
    """Whether the "torch_hal" c10d backend is registered with torch.distributed."""
    return _registered
