"""Decompositions of ATen's ``_foreach_*`` operators into one operator per list element.

Optimizers with ``foreach=True`` (the default on accelerators), ``clip_grad_norm_`` and
GradScaler's helpers call ``_foreach_*`` operators: one call for a whole list of tensors.
PyTorch has no core-ATen decomposition for them (Inductor lowers them itself), so torch-mlir
cannot lower a compiled optimizer step to StableHLO and every one of them ran eagerly, staging
each parameter, gradient and optimizer state through the host. Applied while AOTAutograd traces a
graph, these decompositions turn ``_foreach_add(xs, ys)`` into ``[add(x, y) for x, y in ...]``,
which lower like any other elementwise operator and fuse in the device's compiler.

:func:`foreach_decompositions` returns ``{OpOverload: function}`` for every functional
``_foreach_*`` overload with a per-element equivalent (in-place ones are functionalized into
those before decompositions apply). Left out, so they stay whole: ``_foreach_max`` and
``_foreach_powsum`` (no single per-element operator).
"""

import torch

__all__ = ["foreach_decompositions"]

_PREFIX = "_foreach_"
_LEFT_OUT = {"max", "powsum"}


def _element_op(name):
    """The per-element function of ``aten._foreach_<name>`` (every overload): called with the
    foreach operator's arguments, lists already replaced by their i-th element."""
    if name in ("addcmul", "addcdiv"):
        combine = torch.mul if name == "addcmul" else torch.div

        def ternary(x, a, b, value=1):
            # value: a Python scalar, or (overload "Tensor") one element of a scalars tensor.
            if isinstance(value, torch.Tensor):
                return x + value * combine(a, b)
            return getattr(torch, name)(x, a, b, value=value)

        return ternary
    if name in ("maximum", "minimum"):
        tensors, scalars = getattr(torch, name), (torch.clamp_min if name == "maximum"
                                                  else torch.clamp_max)
        return lambda x, other: tensors(x, other) if isinstance(other, torch.Tensor) else \
            scalars(x, other)
    if name == "norm":
        return lambda x, ord=2, dtype=None: torch.linalg.vector_norm(x, ord, dtype=dtype)
    if name == "copy":
        return lambda x, src, non_blocking=False: torch.ops.aten.copy.default(x, src,
                                                                              non_blocking)
    if name == "zero":
        return torch.zeros_like
    if name == "clone":
        return lambda x, memory_format=None: torch.clone(x, memory_format=memory_format)
    return getattr(torch, name)


def _decomposition(op, element):
    scalars_tensor = op._overloadname == "Tensor" and op.__name__.split(".")[0] in (
        "_foreach_addcmul", "_foreach_addcdiv")

    def decomposed(*args, **kwargs):
        lists = [a for a in args if isinstance(a, (list, tuple))]
        count = len(lists[0])
        out = []
        for i in range(count):
            picked = [a[i] if isinstance(a, (list, tuple)) else a for a in args]
            if scalars_tensor:  # (self, tensor1, tensor2, scalars): a tensor of N scalars
                picked[3] = args[3][i]
            out.append(element(*picked, **kwargs))
        return out

    decomposed.__name__ = f"decompose_{op.__name__.replace('.', '_')}"
    return decomposed


def foreach_decompositions():
    """``{OpOverload: function}``: each functional ``_foreach_*`` overload of this torch,
    decomposed into its per-element operator. Thread-safe (builds a new dict)."""
    table = {}
    for schema in torch._C._jit_get_all_schemas():
        qualified, overload = schema.name, schema.overload_name
        if not qualified.startswith("aten::" + _PREFIX) or qualified.endswith("_"):
            continue  # not a foreach operator, or an in-place one
        if overload == "out" or overload.endswith("_out"):
            continue
        name = qualified[len("aten::" + _PREFIX):]
        if name in _LEFT_OUT or not (name in ("copy", "zero", "clone", "norm")
                                     or hasattr(torch, name)):
            continue
        op = getattr(getattr(torch.ops.aten, _PREFIX + name), overload or "default")
        table[op] = _decomposition(op, _element_op(name))
    return table
