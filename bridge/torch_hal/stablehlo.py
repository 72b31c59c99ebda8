"""torch.compile on neuron: AOTAutograd graphs lowered to StableHLO, as AWS's own backend does.

AWS's native Neuron backend lowers each forward and backward graph that AOTAutograd produces
through torch-mlir to StableHLO and hands the module to the Neuron compiler. This module is the
lowering half of that path, in pure Python (no HAL, no device):

* :func:`lower` imports one aten-level FX graph (AOTAutograd's, after
  ``torch._decomp.core_aten_decompositions()``) with ``torch_mlir.fx.stateless_fx_import`` (a
  module-level export would keep tensor constants as ``dense_resource`` blobs, which XLA's
  importer rejects), lowers it to StableHLO, demotes f64 to f32 (as AWS's backend does) and
  returns a :class:`LoweredGraph`: the module as MLIR text with one public function
  ``@main`` (parameters in the graph's placeholder order, results in its output order), the
  input and output specs, the inputs the graph mutates, and a cache key.
* :func:`partition` (``stablehlo_partition.py``, re-exported here) splits a graph into regions
  torch-mlir lowers (submodules run as lowered programs) and nodes it does not (run eagerly).
  Random ops are never lowered: they run eagerly with the device's generator, so compiled and
  eager code draw the same values.
* Lowerings and partitions are kept on disk (``torch_hal._lowering_cache``), so a new process
  compiling the same graphs does not lower them again.
* :func:`run_with_jax` runs a :class:`LoweredGraph` with jaxlib's XLA CPU client, so lowering
  can be tested numerically without a device; the device path loads the same text as a HAL
  program of format "stablehlo".

Mutated inputs: a functionalized graph writes an input back with ``aten.copy_(input, value)``.
The lowered module returns ``value`` as an extra result (after the graph's own outputs) and
declares that this result must alias the input, with both conventions XLA reads:
``tf.aliasing_output = <result> : i32`` on the parameter and the module attribute
``mhlo.input_output_alias`` (kind ``must_alias``, what AWS's backend emits). An executor passes
the input's buffer for that result, so the input is updated in place.

Requirements: torch-mlir (20261001, the wheel built for torch 2.13) for lowering, jax/jaxlib
(0.10.2; :func:`run_with_jax` uses a private jaxlib API) for running on the host.
"""

import dataclasses
import hashlib
import importlib.util
import threading

import torch
import torch.fx

from . import _lowering_cache

__all__ = ["LoweredGraph", "LoweredSubmodule", "LoweringError", "PartitionReport", "TensorSpec",
           "compile_with_jax", "is_available", "lower", "partition", "run_with_jax"]

_TORCH_MLIR_HINT = "pip install torch-mlir==20261001"
_JAX_HINT = "pip install jax==0.10.2 jaxlib==0.10.2"

# What torch_mlir.fx.stateless_fx_import(output_type="stablehlo") runs after the import (run
# here with the diagnostics kept for the error message, and no reproducer file written).
_PIPELINES = (
    "builtin.module(func.func(torch-match-quantized-custom-ops), "
    "torchdynamo-export-to-torch-backend-pipeline{ extra-library=})",
    "builtin.module(torch-backend-to-stablehlo-backend-pipeline{allow-non-finites=true})",
)

# Shape ops torch-mlir 20261001 does not lower, imported as aten.view to their output shape
# (squeeze.dims comes from the core-aten decompositions of logsumexp, cross_entropy, ...).
_SHAPE_REWRITES = frozenset({torch.ops.aten.squeeze.dims})

# aten.scalar_tensor names its device, which torch-mlir 20261001 imports as aten.to.device and
# does not lower (decompositions of where, threshold_backward, ... make it): imported as
# aten.full of an empty shape, the same value and dtype.
_SCALAR_TENSOR = torch.ops.aten.scalar_tensor.default

# Dialects the lowered module may contain (arith.constant is rewritten to stablehlo.constant).
_ALLOWED_DIALECTS = ("builtin", "func", "stablehlo", "chlo")


class LoweringError(RuntimeError):
    """A graph (or one of its nodes) that torch-mlir does not lower to StableHLO."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One parameter or result of a lowered module.

    ``dtype`` and ``shape`` are the module's; ``graph_dtype`` is the FX graph's, which differs
    only where f64 was demoted to f32 (the caller converts on the way in and out).
    """

    dtype: torch.dtype
    shape: tuple
    graph_dtype: torch.dtype

    def __str__(self):
        dt = str(self.dtype).replace("torch.", "")
        if self.graph_dtype != self.dtype:
            dt += f" (graph: {str(self.graph_dtype).replace('torch.', '')})"
        return f"{dt}{list(self.shape)}"


@dataclasses.dataclass(frozen=True)
class LoweredGraph:
    """A graph lowered to StableHLO.

    ``mlir``: the module as MLIR text; its public function is ``@main``.
    ``input_specs``: one :class:`TensorSpec` per parameter (the graph's placeholders, in order).
    ``output_specs``: one per graph output, None where the graph returns None (such an output
    has no result in the module; the others are the module's results, in order).
    ``aliases``: ``(input index, result index)`` for each mutated input: that module result is
    the input's new value and must alias it; these results follow the graph's outputs.
    ``cache_key``: SHA-256 (hex) of the module text and the specs; it does not depend on
    ``name``, so equal graphs share one compiled program.
    ``input_orders``: per parameter, None, or the order of dims (outermost first in memory) in
    which the module takes an input the graph traced dense but not contiguous (a transpose):
    :meth:`module_input` gives that view, so the input is passed without a copy.
    ``output_layouts``: per graph output, None, or the ``(shape, stride)`` eager traced for an
    output that is dense but not contiguous: the module returns it in memory order, and
    :meth:`graph_output` views the result with eager's strides, without a copy.
    """

    name: str
    mlir: str
    input_specs: tuple
    output_specs: tuple
    aliases: tuple
    cache_key: str
    input_orders: tuple = ()
    output_layouts: tuple = ()

    def module_input(self, i, x):
        """Input ``i`` (a tensor with the graph's shape) as the module's parameter ``i`` takes
        it: a view in memory order where the graph traced it so (contiguous when ``x`` has
        the traced strides)."""
        order = self.input_orders[i] if self.input_orders else None
        return x if order is None else x.permute(order)

    def graph_output(self, i, result):
        """The module's ``result`` for graph output ``i`` (contiguous), as the graph's value:
        a view with eager's shape and strides where it traced them so."""
        layout = self.output_layouts[i] if self.output_layouts else None
        return result if layout is None else result.as_strided(*layout)

    @property
    def mutated_inputs(self):
        """Indices of the inputs the graph writes (in place, through aliased results)."""
        return tuple(i for i, _ in self.aliases)

    @property
    def result_specs(self):
        """The module's results: the graph's non-None outputs, then the mutated inputs."""
        outs = tuple(s for s in self.output_specs if s is not None)
        return outs + tuple(self.input_specs[i] for i, _ in self.aliases)


# --------------------------------------------------------------------------------------------
# Availability


def is_available():
    """Whether lowering and the host runner can work here: ``(True, "")`` or ``(False, why)``.
    Looks the packages up without importing them (importing both takes about two seconds,
    which a process whose lowerings all come from the cache never needs)."""
    for package, hint, label in (("torch_mlir", _TORCH_MLIR_HINT, "torch-mlir"),
                                 ("jax", _JAX_HINT, "jax"), ("jaxlib", _JAX_HINT, "jaxlib")):
        try:
            found = importlib.util.find_spec(package) is not None
        except (ImportError, ValueError) as exc:
            return False, f"{label} cannot be found ({hint}): {exc}"
        if not found:
            return False, f"{label} is not installed ({hint})"
    return True, ""


def _torch_mlir():
    try:
        import torch_mlir.fx as fx
        from torch_mlir import ir
        from torch_mlir.extras import fx_importer
        from torch_mlir.passmanager import PassManager
    except Exception as exc:
        raise LoweringError(f"torch-mlir is not installed ({_TORCH_MLIR_HINT}): {exc}") from None
    return fx, ir, fx_importer, PassManager


# --------------------------------------------------------------------------------------------
# Lowering


def _val(node):
    """The value (a fake tensor, or a tuple of them) FX metadata records for ``node``."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _ensure_metadata(gm, example_inputs):
    """Fills ``meta['val']`` by fake propagation where the graph lacks it (AOT graphs have it,
    but for the higher-order operators that replay RNG state and their getitems)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    missing = [n for n in gm.graph.nodes if n.op not in ("output", "get_attr")
               and "val" not in n.meta]
    if not missing or _propagate_missing(missing):
        return
    if example_inputs is None or len(example_inputs) != len(placeholders):
        raise LoweringError("the graph has no shape metadata and example_inputs do not match "
                            "its placeholders")
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = next((x.fake_mode for x in example_inputs if isinstance(x, FakeTensor)), None)
    mode = mode or FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(x) if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor)
             else x for x in example_inputs]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)


def _propagate_missing(missing):
    """Computes ``meta['val']`` of the ``missing`` call_function nodes alone (in graph order),
    from their arguments' values under the graph's fake mode: a few nodes, where propagating the
    whole graph costs a tenth of a second per AOT graph. False when that cannot be done."""
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensor

    absent = object()
    mode = None
    for node in missing[0].graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, FakeTensor):
            mode = val.fake_mode
            break
    if mode is None or any(n.op != "call_function" for n in missing):
        return False
    for node in missing:
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                             lambda a: a.meta.get("val", absent))
        if any(v is absent for v in pytree.tree_leaves((args, kwargs))):
            return False
        try:
            with mode:
                node.meta["val"] = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the whole graph is propagated instead
            return False
    return True


def _spec(val, what):
    if not isinstance(val, torch.Tensor):
        raise LoweringError(f"{what} is not a tensor ({type(val).__name__}): only static-shape "
                            "tensor graphs are lowered")
    shape = tuple(val.shape)
    if not all(isinstance(d, int) for d in shape):
        raise LoweringError(f"{what} has a dynamic shape {shape}: only static shapes are lowered")
    dtype = torch.float32 if val.dtype == torch.float64 else val.dtype
    return TensorSpec(dtype, shape, val.dtype)


def _functional_graph(gm):
    """A copy of ``gm`` without input mutations, and what they were, ready for the importer.

    Shape ops in ``_SHAPE_REWRITES`` become views, ``aten.scalar_tensor`` an ``aten.full``.
    Each ``aten.copy_(placeholder, value)`` is removed; ``value`` becomes an extra output (cast
    and broadcast to the placeholder's dtype and shape where they differ), and readers of the
    placeholder (or of the copy's result) after it read ``value``. Returns ``(graph module,
    graph outputs (nodes, or None), [(input index, value node)])``.
    """
    graph = torch.fx.Graph()
    env = {}
    for node in gm.graph.nodes:
        if node.op == "output":
            break
        env[node] = graph.node_copy(node, lambda n: env[n])
    placeholders = [env[n] for n in gm.graph.nodes if n.op == "placeholder"]
    index = {p: i for i, p in enumerate(placeholders)}
    order = {n: i for i, n in enumerate(graph.nodes)}

    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in _SHAPE_REWRITES:
            # A shape op torch-mlir lacks: the same value as a view to its (static) shape.
            node.target = torch.ops.aten.view.default
            node.args, node.kwargs = (node.args[0], list(_val(node).shape)), {}
        elif node.op == "call_function" and node.target is _SCALAR_TENSOR:
            node.target = torch.ops.aten.full.default
            node.args, node.kwargs = ([], node.args[0]), {"dtype": _val(node).dtype}

    writes = {}  # placeholder -> its new value (the last write wins)
    replaced = {}  # removed copy_ node -> its value
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target is torch.ops.aten.copy_.default and node.args[0] in index:
            dst, src = node.args[0], node.args[1]
            if not isinstance(src, torch.fx.Node):
                raise LoweringError(f"{node.format_node()}: copy of a non-tensor into an input")
            src = _match(graph, node, src, _val(dst))
            for user in list(dst.users):
                if user is not node and order.get(user, -1) > order[node]:
                    user.replace_input_with(dst, src)
            node.replace_all_uses_with(src)
            graph.erase_node(node)
            replaced[node] = src
            writes[dst] = src
        elif node.target._schema.is_mutable:
            raise LoweringError(f"{node.format_node()}: in-place op in a graph that is not "
                                "functionalized (only copy_ into an input is lowered)")

    outs = gm.graph.output_node().args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    graph_outputs = []
    for i, o in enumerate(outs):
        if o is None:
            graph_outputs.append(None)
        elif isinstance(o, torch.fx.Node):
            graph_outputs.append(replaced.get(env[o], env[o]))
        else:
            raise LoweringError(f"graph output {i} is not a tensor ({o!r})")
    mutations = [(index[p], v) for p, v in writes.items()]
    graph.output(tuple([o for o in graph_outputs if o is not None] + [v for _, v in mutations]))
    return torch.fx.GraphModule(gm, graph), graph_outputs, mutations


def _match(graph, before, src, dst_val):
    """``src`` cast and broadcast to ``dst_val``'s dtype and shape (new nodes before ``before``)."""
    sval = _val(src)
    with graph.inserting_before(before):
        if sval.dtype != dst_val.dtype:
            src = graph.call_function(torch.ops.aten._to_copy.default, (src,),
                                      {"dtype": dst_val.dtype})
            sval = torch.ops.aten._to_copy.default(sval, dtype=dst_val.dtype)
            src.meta["val"] = sval
        if tuple(sval.shape) != tuple(dst_val.shape):
            src = graph.call_function(torch.ops.aten.expand.default, (src, list(dst_val.shape)))
            sval = torch.ops.aten.expand.default(sval, list(dst_val.shape))
            src.meta["val"] = sval
            src = graph.call_function(torch.ops.aten.clone.default, (src,))
            src.meta["val"] = torch.ops.aten.clone.default(sval)
    return src


def _dense_literal_hooks(fx_importer, ir):
    """Importer hooks that inline tensor constants as dense elements, never ``dense_resource``."""

    class Hooks(fx_importer.FxImporterHooks):
        def resolve_literal(self, gni, literal, info):
            if not isinstance(literal, torch.Tensor) or literal.numel() <= 1:
                return None  # the importer's default (dense splats) is fine
            t = literal.detach().cpu().contiguous()
            element_type = fx_importer.TORCH_DTYPE_TO_MLIR_TYPE[t.dtype]()
            if t.dtype == torch.bfloat16:
                array = t.view(torch.int16).numpy()
            else:
                array = t.numpy()
            attr = ir.DenseElementsAttr.get(array, type=element_type, shape=list(t.shape))
            vtype = gni._cc.tensor_to_vtensor_type(t)
            return ir.Operation.create(name="torch.vtensor.literal", results=[vtype],
                                       attributes={"value": attr}).result

    return Hooks()


def _all_ops(module):
    """Every operation in the module, the module itself included, in pre-order."""
    from torch_mlir import ir

    ops = []

    def visit(op):
        ops.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return ops


def _demote_f64(module, ir):
    """Rewrites every f64 in the module (types, constants, the signature) as f32."""
    f32 = ir.F32Type.get()

    def conv(t):
        if isinstance(t, ir.RankedTensorType) and isinstance(t.element_type, ir.F64Type):
            return ir.RankedTensorType.get(t.shape, f32, t.encoding)
        return f32 if isinstance(t, ir.F64Type) else t

    for op in _all_ops(module):
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    arg.set_type(conv(arg.type))
        for r in op.results:
            r.set_type(conv(r.type))
        attr = op.attributes["value"] if "value" in op.attributes else None
        if isinstance(attr, ir.DenseFPElementsAttr) and \
                isinstance(attr.type.element_type, ir.F64Type):
            if attr.is_splat:
                v = attr.get_splat_value().value
                attr = ir.DenseElementsAttr.get_splat(conv(attr.type), ir.FloatAttr.get(f32, v))
            else:
                import numpy as np

                arr = np.array(attr).astype(np.float32)
                attr = ir.DenseElementsAttr.get(arr, type=f32, shape=list(arr.shape))
            op.attributes["value"] = attr
        if op.name == "func.func":
            ft = op.attributes["function_type"].value
            op.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
                [conv(t) for t in ft.inputs], [conv(t) for t in ft.results]))


def _stablehlo_constants(module, ir):
    """Rewrites ``arith.constant`` tensors (left by torch-mlir) as ``stablehlo.constant``."""
    for op in _all_ops(module):
        if op.name != "arith.constant" or not isinstance(op.results[0].type, ir.RankedTensorType):
            continue
        with op.location, ir.InsertionPoint(op):
            new = ir.Operation.create("stablehlo.constant", results=[op.results[0].type],
                                      attributes={"value": op.attributes["value"]})
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()


def _torch_ops_left(module):
    """The aten ops still in the module after a failed lowering ("aten.fmod.Scalar", ...)."""
    names = []
    for op in _all_ops(module):
        if op.name == "torch.operator":
            names.append(op.attributes["name"].value)
        elif op.name.startswith("torch.aten."):
            names.append(op.name)
    return list(dict.fromkeys(n[len("torch."):] if n.startswith("torch.") else n for n in names))


def _check_dialects(module, name):
    bad = sorted({op.name for op in _all_ops(module)
                  if op.name.split(".")[0] not in _ALLOWED_DIALECTS})
    if bad:
        raise LoweringError(f"{name}: the lowered module is not pure StableHLO: " + ", ".join(bad))


def _declare_aliases(module, ir, aliases, n_inputs):
    """Marks each mutated input's result as aliasing it (tf.aliasing_output, must_alias)."""
    func = next(op for op in _all_ops(module) if op.name == "func.func")
    alias_of = dict(aliases)
    i32 = ir.IntegerType.get_signless(32)
    old = list(func.attributes["arg_attrs"]) if "arg_attrs" in func.attributes else []
    arg_attrs = []
    for i in range(n_inputs):
        entries = {a.name: a.attr for a in old[i]} if i < len(old) else {}
        if i in alias_of:
            entries["tf.aliasing_output"] = ir.IntegerAttr.get(i32, alias_of[i])
        arg_attrs.append(ir.DictAttr.get(entries))
    func.attributes["arg_attrs"] = ir.ArrayAttr.get(arg_attrs)
    # XLA returns several results as a tuple (result r is at index {r}), one result bare ({}).
    n_results = len(func.attributes["function_type"].value.results)
    entries = ", ".join(
        f'{{alias = {{kind = "must_alias", parameter_index = array<i64>, '
        f"parameter_number = {i} : i64}}, "
        f"output_index = array<i64{f': {r}' if n_results > 1 else ''}>}}"
        for i, r in aliases)
    module.operation.attributes["mhlo.input_output_alias"] = ir.Attribute.parse(f"[{entries}]")


def _cache_key(text, inputs, outputs, aliases):
    h = hashlib.sha256(text.encode())
    h.update(repr([(str(s.dtype), s.shape, str(s.graph_dtype)) for s in inputs]).encode())
    h.update(repr([None if s is None else (str(s.dtype), s.shape, str(s.graph_dtype))
                   for s in outputs]).encode())
    h.update(repr(tuple(aliases)).encode())
    return h.hexdigest()


# torch-mlir's MLIR contexts are not to be used from two threads at once.
_LOCK = threading.RLock()


def lower(gm, example_inputs=None, *, name="main"):
    """Lowers an aten-level FX graph (AOTAutograd's forward or backward) to StableHLO.

    ``example_inputs`` (real or fake tensors, one per placeholder) are used only when the graph
    carries no shape metadata. ``name`` names the result (errors, dumps); it is not part of the
    module text or the cache key. Raises :class:`LoweringError` if torch-mlir cannot lower the
    graph. Returns a :class:`LoweredGraph`.
    """
    _ensure_metadata(gm, example_inputs)
    key = _lowering_cache.graph_key(gm)
    entry = _lowering_cache.lookup(key)
    if entry is not None:
        cached = _from_cache_entry(entry, name)
        if isinstance(cached, LoweringError):
            raise cached
        if cached is not None:
            return cached
    tools = _torch_mlir()  # not installed: an error of this process, not of the graph
    try:
        lowered = _lower(gm, name, *tools)
    except LoweringError as exc:
        _lowering_cache.store(key, {"name": name, "error": str(exc)})
        raise
    _lowering_cache.store(key, _cache_entry(lowered))
    return lowered


def _spec_entry(spec):
    return None if spec is None else [str(spec.dtype), list(spec.shape), str(spec.graph_dtype)]


def _spec_from_entry(entry):
    if entry is None:
        return None
    dtype, shape, graph_dtype = entry
    return TensorSpec(_dtype(dtype), tuple(shape), _dtype(graph_dtype))


def _dtype(text):
    dtype = getattr(torch, text.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {text}")
    return dtype


def _cache_entry(lowered):
    return {"mlir": lowered.mlir, "input_specs": [_spec_entry(s) for s in lowered.input_specs],
            "output_specs": [_spec_entry(s) for s in lowered.output_specs],
            "aliases": [list(a) for a in lowered.aliases],
            "input_orders": [None if o is None else list(o) for o in lowered.input_orders],
            "output_layouts": [None if lay is None else [list(lay[0]), list(lay[1])]
                               for lay in lowered.output_layouts]}


def _from_cache_entry(entry, name):
    """The LoweredGraph (named ``name``) or LoweringError an entry of the lowering cache holds;
    None for an entry that does not read as either."""
    try:
        if "error" in entry:
            message, was = entry["error"], entry["name"] + ": "
            return LoweringError(name + ": " + message[len(was):] if message.startswith(was)
                                 else message)
        input_specs = tuple(_spec_from_entry(s) for s in entry["input_specs"])
        output_specs = tuple(_spec_from_entry(s) for s in entry["output_specs"])
        aliases = tuple((int(i), int(r)) for i, r in entry["aliases"])
        input_orders = tuple(None if o is None else tuple(int(d) for d in o)
                             for o in entry["input_orders"])
        output_layouts = tuple(None if lay is None else (tuple(lay[0]), tuple(lay[1]))
                               for lay in entry["output_layouts"])
        text = entry["mlir"]
        return LoweredGraph(name=name, mlir=text, input_specs=input_specs,
                            output_specs=output_specs, aliases=aliases,
                            cache_key=_cache_key(text, input_specs, output_specs, aliases),
                            input_orders=input_orders, output_layouts=output_layouts)
    except (KeyError, TypeError, ValueError):
        return None


def _memory_order(val):
    """The order of ``val``'s dims in memory (outermost first) where it is a dense tensor that
    is not contiguous (a transpose, channels-last); None for anything else."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    if not isinstance(val, torch.Tensor) or val.is_contiguous() or not dense(val):
        return None
    return sorted(range(val.dim()), key=lambda d: (-val.stride(d), d))


def _memory_order_layouts(fgm, graph_outputs, mutations):
    """Makes the module take and return dense non-contiguous tensors in memory order, so that
    neither side copies them into or out of row-major order: such a placeholder (one the graph
    does not mutate) gets its memory-order shape and a permute back for its users; such an
    output is permuted into memory order before it is returned. Returns ``(input orders,
    output layouts)`` as :class:`LoweredGraph` keeps them (``graph_outputs`` is updated)."""
    graph = fgm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    mutated = {i for i, _ in mutations}
    permute = torch.ops.aten.permute.default
    orders = []
    for i, ph in enumerate(placeholders):
        val = _val(ph)
        order = None if i in mutated else _memory_order(val)
        orders.append(None if order is None else tuple(order))
        if order is None:
            continue
        inverse = sorted(range(len(order)), key=order.__getitem__)
        with graph.inserting_after(ph):
            back = graph.call_function(permute, (ph, inverse))
        ph.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
        ph.meta["val"] = permute(val, order)
        ph.meta.pop("tensor_meta", None)  # the importer would read the traced shape from it
        back.meta["val"] = val
    output = graph.output_node()
    results = list(output.args[0])
    layouts, k = [], 0
    for i, o in enumerate(graph_outputs):
        if o is None:
            layouts.append(None)
            continue
        val = _val(o)
        order = _memory_order(val)
        layouts.append(None if order is None else (tuple(val.shape), tuple(val.stride())))
        if order is not None:
            with graph.inserting_before(output):
                ordered = graph.call_function(permute, (o, order))
            ordered.meta["val"] = permute(val, order)
            results[k] = graph_outputs[i] = ordered
        k += 1
    output.args = (tuple(results),)
    fgm.recompile()
    if not any(orders) and not any(layouts):
        return (), ()
    return tuple(orders), tuple(layouts)


def _lower(gm, name, tmfx, ir, fx_importer, PassManager):
    """:func:`lower` itself, through torch-mlir (``gm`` has its metadata)."""
    fgm, graph_outputs, mutations = _functional_graph(gm)
    input_orders, output_layouts = _memory_order_layouts(fgm, graph_outputs, mutations)
    placeholders = [n for n in fgm.graph.nodes if n.op == "placeholder"]
    input_specs = tuple(_spec(_val(p), f"input {i} ({p.name})")
                        for i, p in enumerate(placeholders))
    output_specs = tuple(None if o is None else _spec(_val(o), f"output {i} ({o.name})")
                         for i, o in enumerate(graph_outputs))
    n_results = sum(s is not None for s in output_specs)
    aliases = tuple((i, n_results + k) for k, (i, _) in enumerate(mutations))

    with _LOCK:
        context = ir.Context()
        context.enable_multithreading(False)  # one function: threads would only cost
        tmfx.torch_d.register_dialect(context)
        diagnostics = []

        def on_diagnostic(d):
            diagnostics.append(str(d.message))
            return True

        context.attach_diagnostic_handler(on_diagnostic)
        importer = fx_importer.FxImporter(context=context,
                                          hooks=_dense_literal_hooks(fx_importer, ir))
        try:
            module = tmfx.stateless_fx_import(fgm, output_type="raw", fx_importer=importer,
                                              model_name="main")
        except Exception as exc:
            raise LoweringError(f"{name}: torch-mlir does not import the graph: "
                                f"{_first_line(str(exc))}") from None
        with context, ir.Location.unknown():
            context.emit_error_diagnostics = True
            for pipeline in _PIPELINES:
                try:
                    PassManager.parse(pipeline).run(module.operation)
                except Exception as exc:
                    why = "; ".join(dict.fromkeys(diagnostics)) or _first_line(str(exc))
                    left = _torch_ops_left(module)
                    ops = f"no StableHLO lowering of {', '.join(left)}: " if left else ""
                    raise LoweringError(f"{name}: torch-mlir does not lower the graph: {ops}"
                                        f"{why}") from None
            _demote_f64(module, ir)
            _stablehlo_constants(module, ir)
            _check_dialects(module, name)
            if aliases:
                _declare_aliases(module, ir, aliases, len(input_specs))
            try:
                verified = module.operation.verify()
            except Exception as exc:
                verified, diagnostics[:] = False, diagnostics + [_first_line(str(exc))]
            if not verified:
                raise LoweringError(f"{name}: the lowered module does not verify: "
                                    + "; ".join(dict.fromkeys(diagnostics)))
            text = module.operation.get_asm(enable_debug_info=False)
    return LoweredGraph(name=name, mlir=text, input_specs=input_specs, output_specs=output_specs,
                        aliases=aliases,
                        cache_key=_cache_key(text, input_specs, output_specs, aliases),
                        input_orders=input_orders, output_layouts=output_layouts)


def _first_line(message):
    return next((line.strip() for line in message.splitlines() if line.strip()), "")


# --------------------------------------------------------------------------------------------
# Running on the host with XLA (tests)

_EXECUTABLES = {}


def _xla():
    try:
        from jax._src import xla_bridge
        from jax._src.lib import xla_client
    except Exception as exc:
        raise RuntimeError(f"jax is not installed ({_JAX_HINT}): {exc}") from None
    return xla_bridge, xla_client


def compile_with_jax(lowered):
    """The module compiled by jaxlib's XLA CPU client (cached per cache key)."""
    exe = _EXECUTABLES.get(lowered.cache_key)
    if exe is None:
        xla_bridge, xla_client = _xla()
        backend = xla_bridge.get_backend("cpu")
        devices = xla_client.DeviceList(tuple(backend.local_devices()[:1]))
        exe = backend.compile_and_load(lowered.mlir, executable_devices=devices,
                                       compile_options=xla_client.CompileOptions())
        _EXECUTABLES[lowered.cache_key] = exe
    return exe


def _to_numpy(t, dtype):
    t = t.detach().to("cpu", dtype).contiguous()
    if dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_numpy(a, spec):
    import numpy as np

    a = np.array(a)  # a writable copy
    if spec.dtype == torch.bfloat16:
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a)
    return t.reshape(spec.shape).to(spec.graph_dtype)


def run_with_jax(lowered, inputs):
    """Runs a :class:`LoweredGraph` with XLA on the host, as a device would run the program.

    ``inputs``: one tensor per parameter. Returns the graph outputs (CPU tensors in the
    graph's dtypes, None where the graph returns None); mutated inputs are updated in place.
    """
    import jax

    if len(inputs) != len(lowered.input_specs):
        raise ValueError(f"{lowered.name}: {len(inputs)} inputs for "
                         f"{len(lowered.input_specs)} parameters")
    exe = compile_with_jax(lowered)
    device = exe.local_devices()[0]
    args = []
    with jax.enable_x64(True):  # without it, jax would pass int64 inputs as int32
        for i, (x, spec) in enumerate(zip(inputs, lowered.input_specs)):
            x = lowered.module_input(i, x)
            if tuple(x.shape) != spec.shape:
                raise ValueError(f"{lowered.name}: input {i} has shape {tuple(x.shape)}, the "
                                 f"module takes {spec}")
            args.append(jax.device_put(_to_numpy(x, spec.dtype), device))
        results = exe.execute(args)
    results = [_from_numpy(r, s) for r, s in zip(results, lowered.result_specs)]
    n = len(results) - len(lowered.aliases)
    for (i, _), r in zip(lowered.aliases, results[n:]):
        with torch.no_grad():
            inputs[i].copy_(r)
    it = iter(results[:n])
    return [None if s is None else lowered.graph_output(i, next(it))
            for i, s in enumerate(lowered.output_specs)]


# The partitioning half (stablehlo_partition.py), imported last: it uses what is defined above.
from .stablehlo_partition import (LoweredSubmodule, PartitionReport, _Lowerable,  # noqa: E402
                                  partition)
