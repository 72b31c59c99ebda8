"""Random ops recomputed under torch.compile (activation checkpointing) on the device, on a torch
without patch 0022.

When a random op (``native_dropout``, ``rand``...) of the forward is recomputed in the backward
(activation checkpointing, or a recompute decision of the partitioner), AOTAutograd's partitioner
wraps it in two higher-order operators of ``torch._prims.rng_prims``: ``run_and_save_rng_state``
in the forward (the generator's state before the op, and the op's result) and
``run_with_rng_state`` in the backward (the op again, with that state), so that the recomputation
draws the forward's numbers. torch 2.13.0 implements both for cuda, cpu, hpu and xpu only: on a
PrivateUse1 device the compiled forward (or, when a backend traces it with fake tensors, the
compilation) stops with ``AssertionError: Backend not supported for <device>``.

Patch 0022 of the torch-hal series (patches/) registers PrivateUse1 implementations that get and
set the state through the device module (``torch.<device>.get_rng_state()`` /
``set_rng_state()``) and names the renamed backend in the operators' BackendSelect maps.
:func:`install` makes the same at run time where the patch is missing: it registers the
PrivateUse1 kernels and puts wrappers in front of the implementations that reject the device
(``run_and_save_rng_state``'s BackendSelect kernel, its fake-tensor and proxy-tracing
implementations, which call that kernel's closure, and ``run_with_rng_state``'s BackendSelect
kernel); every other device keeps torch's own implementation.
"""

import threading

import torch

__all__ = ["install", "installed"]

_lock = threading.Lock()
_state = None  # None: not asked yet; "patched": torch serves the device; "installed": here


def installed():
    """Whether :func:`install` put its workaround in place (False where torch had the fix)."""
    return _state == "installed"


def _torch_serves_privateuse1(rng_prims):
    """Patch 0022 (or an upstream fix) registers PrivateUse1 kernels for both operators."""
    key = torch._C.DispatchKey.PrivateUse1
    return all(key in hop.py_kernels
               for hop in (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state))


def install(device_type):
    """Makes torch's ``run_and_save_rng_state`` / ``run_with_rng_state`` serve ``device_type``
    (the renamed PrivateUse1 backend) unless torch already does. Idempotent; call it before
    AOTAutograd partitions a graph of the device."""
    global _state
    if _state is not None:
        return
    with _lock:
        if _state is not None:
            return
        from torch._prims import rng_prims

        if _torch_serves_privateuse1(rng_prims):
            _state = "patched"
            return
        _install(rng_prims, device_type)
        _state = "installed"


def _install(rng_prims, device_type):
    import torch.utils._pytree as pytree
    from torch._C import DispatchKey
    from torch._higher_order_ops.utils import registered_hop_fake_fns
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode, track_tensor_tree

    def device_module():
        return torch.get_device_module(device_type)

    def ours(args, kwargs):
        return rng_prims.get_device(args, kwargs) == device_type

    # run_and_save_rng_state: the forward's op, with the generator state it starts from.
    save = rng_prims.run_and_save_rng_state

    def save_impl(op, *args, **kwargs):
        return device_module().get_rng_state(), op(*args, **kwargs)

    save_select = save.py_kernels[DispatchKey.BackendSelect]
    save_fake = registered_hop_fake_fns[save]
    save_proxy = save.python_key_table[ProxyTorchDispatchMode]

    def save_backend_select(op, *args, **kwargs):
        if ours(args, kwargs):
            return save_impl(op, *args, **kwargs)
        return save_select(op, *args, **kwargs)

    def save_fake_impl(op, *args, **kwargs):
        if ours(args, kwargs):
            return save_backend_select(op, *args, **kwargs)
        return save_fake(op, *args, **kwargs)

    def save_proxy_impl(mode, op, *args, **kwargs):
        if not ours(args, kwargs):
            return save_proxy(mode, op, *args, **kwargs)
        out = save_backend_select(op, *args, **kwargs)
        proxy_args = pytree.tree_map(mode.tracer.unwrap_proxy, (op, *args))
        proxy_kwargs = pytree.tree_map(mode.tracer.unwrap_proxy, kwargs)
        out_proxy = mode.tracer.create_proxy("call_function", save, proxy_args, proxy_kwargs)
        return track_tensor_tree(out, out_proxy, constant=None, tracer=mode.tracer)

    # run_with_rng_state: the backward's recomputation, from the saved state.
    replay = rng_prims.run_with_rng_state

    def replay_impl(rng_state, op, *args, **kwargs):
        module = device_module()
        current_state = module.get_rng_state()
        module.set_rng_state(rng_state.cpu())
        out = op(*args, **kwargs)
        module.set_rng_state(current_state)
        return out

    replay_select = replay.py_kernels[DispatchKey.BackendSelect]

    def replay_backend_select(rng_state, op, *args, **kwargs):
        if ours(args, kwargs):
            return replay_impl(rng_state, op, *args, **kwargs)
        return replay_select(rng_state, op, *args, **kwargs)

    # py_impl() refuses to replace a kernel: the tables are written directly, and each
    # operator's dispatch cache (which holds the kernels it already looked up) is cleared.
    save.py_kernels[DispatchKey.PrivateUse1] = save_impl
    save.py_kernels[DispatchKey.BackendSelect] = save_backend_select
    save.python_key_table[ProxyTorchDispatchMode] = save_proxy_impl
    registered_hop_fake_fns[save] = save_fake_impl
    replay.py_kernels[DispatchKey.PrivateUse1] = replay_impl
    replay.py_kernels[DispatchKey.BackendSelect] = replay_backend_select
    for hop in (save, replay):
        hop._dispatch_cache.clear()
