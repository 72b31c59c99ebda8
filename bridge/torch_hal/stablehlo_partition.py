"""torch.compile on neuron: the partition of a graph into StableHLO regions and eager nodes.

:func:`partition` (re-exported by :mod:`torch_hal.stablehlo`) splits an AOTAutograd graph into
the regions torch-mlir lowers (:class:`LoweredSubmodule` children, run as lowered programs) and
the nodes it does not (run eagerly, as in the graph). Whether a node lowers is decided per op by
lowering a graph of the node alone (:class:`_Lowerable`); random ops never lower, but dropout's
masks are drawn outside the programs and passed in (``torch_hal.stablehlo_dropout``). A graph
partitioned before, in this process or another, is split again from the lowering cache
(``torch_hal._lowering_cache``): the verdict on every node and the regions.
"""

import collections
import dataclasses
import importlib.util
import operator

import torch
import torch.fx

from . import _lowering_cache
from .stablehlo import (_TORCH_MLIR_HINT, LoweredGraph, LoweringError, _cache_entry,
                        _ensure_metadata, _from_cache_entry, _val, lower)
from .stablehlo_dropout import (draw_bernoulli_from_state, draw_dropout_masks_outside,
                                is_random, rng_hop_name)

__all__ = ["LoweredSubmodule", "PartitionReport", "partition"]


def _op_name(target):
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # "aten.add.Tensor"
    return getattr(target, "__name__", str(target))


def _node_name(node):
    """The op a counted node runs: ``aten.add.Tensor``, or ``run_with_rng_state(aten.rand...)``
    for a random-state higher-order operator and its op."""
    hop = rng_hop_name(node.target)
    if hop:
        op = node.args[1 if hop == "run_with_rng_state" else 0]
        return f"{hop}({_op_name(op)})"
    return _op_name(node.target)


def _counted_nodes(graph):
    """The nodes the report counts: operator overloads and the random-state higher-order
    operators (which run an op eagerly)."""
    return [n for n in graph.nodes if n.op == "call_function"
            and (isinstance(n.target, torch._ops.OpOverload) or rng_hop_name(n.target))]


def _tensor_key(v):
    if isinstance(v, torch.Tensor):
        return (str(v.dtype), v.dim())
    if isinstance(v, (list, tuple)):
        return tuple(_tensor_key(x) for x in v)
    return None


def _probe_graph(node):
    """A graph of ``node`` alone: each node argument a placeholder, each result an output."""
    graph = torch.fx.Graph()
    env = {}
    for arg in node.all_input_nodes:
        p = graph.placeholder(f"in{len(env)}")
        p.meta["val"] = _val(arg)
        env[arg] = p
    copy_ = graph.node_copy(node, lambda n: env[n])
    val = _val(node)
    if isinstance(val, (tuple, list)):
        outs = []
        for i, v in enumerate(val):
            if isinstance(v, torch.Tensor):
                g = graph.call_function(operator.getitem, (copy_, i))
                g.meta["val"] = v
                outs.append(g)
        graph.output(tuple(outs))
    else:
        graph.output((copy_,))
    return torch.fx.GraphModule(node.graph.owning_module or torch.nn.Module(), graph)


class _Lowerable:
    """Operator support for the partitioner: does torch-mlir lower this node?

    Decided per op by lowering a graph of the node alone, cached per (op, argument dtypes and
    ranks). Random ops never lower, nor do the nodes named in ``exact_unsupported`` (found not
    to lower with their own arguments, or only as part of their region).
    """

    _cache = {}

    def __init__(self):
        self.exact_unsupported = set()
        self.reasons = {}

    def is_node_supported(self, submodules, node):
        if node.op != "call_function" or node.name in self.exact_unsupported:
            return False
        if node.target is operator.getitem:
            src = node.args[0]
            return isinstance(src, torch.fx.Node) and self.is_node_supported(submodules, src)
        if rng_hop_name(node.target):
            self.reasons[_node_name(node)] = ("random op under a saved generator state: runs "
                                              "eagerly with the device's generator")
            return False
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        if is_random(node.target):
            self.reasons[_op_name(node.target)] = ("random op: runs eagerly with the device's "
                                                   "generator")
            return False
        val = _val(node)
        vals = val if isinstance(val, (tuple, list)) else (val,)
        if not all(isinstance(v, torch.Tensor) or v is None for v in vals):
            return False
        # A tensor without elements has no bytes to bind (a Neuron tensor has at least one):
        # nodes that take or make one run eagerly, where they cost nothing.
        touched = list(vals) + [_val(a) for a in node.all_input_nodes]
        if any(isinstance(v, torch.Tensor) and v.numel() == 0 for v in touched):
            self.reasons[_op_name(node.target)] = "a tensor without elements (runs eagerly)"
            return False
        key = (node.target, tuple(_tensor_key(_val(a)) for a in node.all_input_nodes),
               _tensor_key(val))
        if key not in self._cache:
            self._cache[key] = self.probe(node)
        ok, why = self._cache[key]
        if not ok:
            self.reasons[_op_name(node.target)] = why
        return ok

    @staticmethod
    def probe(node):
        try:
            lower(_probe_graph(node), name=_op_name(node.target))
            return True, ""
        except Exception as exc:
            return False, str(exc)


@dataclasses.dataclass
class PartitionReport:
    """What :func:`partition` lowered: counts of op nodes (aten and other operator overloads;
    getitem and placeholders are not counted), the eager ones by op name, and why they did not
    lower; ``draws``: the dropout masks drawn outside the programs (not op nodes of the graph:
    passed in, as AWS's Neuron backend does); ``replays``: of those, the ones a backward
    recomputes from a forward's saved generator state (the forward's draw where it was kept,
    else drawn again)."""

    total: int
    lowered: int
    eager: int
    eager_ops: dict
    submodules: list
    reasons: dict
    draws: int = 0
    replays: int = 0

    @property
    def lowered_fraction(self):
        return self.lowered / self.total if self.total else 1.0

    def __str__(self):
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.eager_ops.items())) or "none"
        drawn = ""
        if self.draws > self.replays:
            drawn = f"; {self.draws - self.replays} dropout mask(s) drawn outside the programs"
        if self.replays:
            drawn += (f"; {self.replays} dropout mask(s) replayed outside the programs (the "
                      "forward's draws, where kept)")
        return (f"{self.lowered}/{self.total} op nodes lowered "
                f"({100.0 * self.lowered_fraction:.1f}%) in {len(self.submodules)} submodule(s); "
                f"{self.eager} eager: {ops}{drawn}")


class LoweredSubmodule(torch.nn.Module):
    """A region of a partitioned graph: its FX graph and the :class:`LoweredGraph` of it.

    Calling it runs ``executor(lowered, inputs)`` (which returns the graph outputs and updates
    mutated inputs in place), or the FX graph eagerly while ``executor`` is None. A region whose
    module would have more than ``max_tensors`` parameters and results (what one HAL launch
    passes) still runs as one program where a few of its inputs can share one parameter
    (``packing``: they are copied into one buffer on the device before the launch, and the
    module slices them out); otherwise it runs as consecutive pieces, each lowered on its own
    (``chunks``).
    """

    def __init__(self, graph_module, lowered, executor=None, max_tensors=None):
        super().__init__()
        self.graph_module = graph_module
        self.lowered = lowered
        self.chunks = None
        self.packing = None
        n = len(lowered.input_specs) + len(lowered.result_specs)
        if max_tensors is not None and n > max_tensors:
            self.packing = _pack_inputs(graph_module, lowered, max_tensors)
            if self.packing is None:
                self.chunks = _split_in_pieces(graph_module, max_tensors)
        self._executor = None
        self.executor = executor
        out = graph_module.graph.output_node().args[0]
        self._single = not isinstance(out, (tuple, list))
        self._strided = _strided_outputs([out] if self._single else list(out))

    @property
    def executor(self):
        return self._executor

    @executor.setter
    def executor(self, executor):
        self._executor = executor
        if self.chunks is not None:
            for child in self.chunks.children():
                child.executor = executor

    def forward(self, *args):
        if self.executor is None:
            return self.graph_module(*args)
        if self.chunks is not None:
            return self.chunks(*args)
        if self.packing is not None:
            outs = self.executor(self.packing.lowered, self.packing.arguments(args))
        else:
            outs = self.executor(self.lowered, list(args))
        if self._strided:  # eager's strides, where an executor did not keep them
            outs = list(outs)
            for i, stride in self._strided:
                o = outs[i]
                if o.stride() != stride:
                    outs[i] = torch.empty_strided(o.shape, stride, dtype=o.dtype,
                                                  device=o.device).copy_(o)
        return outs[0] if self._single else tuple(outs)


@dataclasses.dataclass(frozen=True)
class _InputPacking:
    """Inputs of a region that share one module parameter (see :func:`_pack_inputs`).

    ``lowered``: the module that takes them so; ``kept``: the indices of the region's other
    inputs, in order (the module's first parameters); ``packed``: ``(index, offset, numel)`` of
    each shared input in the last parameter, a 1-D tensor of ``dtype`` and ``numel`` elements.
    """

    lowered: object
    kept: tuple
    packed: tuple
    dtype: torch.dtype
    numel: int

    def arguments(self, args):
        """The module's arguments for the region's inputs ``args``: the kept ones, then one
        buffer on the first shared input's device with the shared ones copied in (copies on
        the device, in stream order)."""
        first = args[self.packed[0][0]]
        buffer = torch.empty(self.numel, dtype=self.dtype, device=first.device)
        with torch.no_grad():
            for i, offset, numel in self.packed:
                buffer.narrow(0, offset, numel).view(args[i].shape).copy_(args[i])
        return [args[i] for i in self.kept] + [buffer]


def _pack_inputs(gm, lowered, max_tensors):
    """An :class:`_InputPacking` for the region ``gm`` (lowered as ``lowered``) whose module
    passes at most ``max_tensors`` tensors, or None where none does.

    Inputs can share a parameter when they have one dtype, are contiguous tensors with elements
    on the graph's device (not host inputs of a device graph, which go through pinned memory),
    are not written by the graph, are not returned as they are, and are taken as the graph
    traced them (no demoted dtype, no memory order of their own). The smallest such inputs of
    one dtype are taken, as few as make the module fit: each costs a copy on the device per
    launch, and a launch saved is worth more (one program rather than pieces, and no
    intermediate results passed between them: the demo model's compiled step on the emulator
    is about 5% faster with its backward as one program)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    n = len(lowered.input_specs) + len(lowered.result_specs)
    count = n - max_tensors + 1  # k inputs in one parameter: k - 1 fewer tensors
    if count < 2 or count > len(placeholders) or len(placeholders) != len(lowered.input_specs):
        return None
    vals = [_val(node) for node in placeholders]
    device = next((v.device for v in vals if isinstance(v, torch.Tensor)
                   and v.device.type != "cpu"), torch.device("cpu"))
    returned = set(gm.graph.output_node().all_input_nodes)
    mutated = set(lowered.mutated_inputs)
    groups = collections.defaultdict(list)
    for i, (node, val, spec) in enumerate(zip(placeholders, vals, lowered.input_specs)):
        order = lowered.input_orders[i] if lowered.input_orders else None
        if (isinstance(val, torch.Tensor) and val.device == device and val.numel() > 0
                and val.is_contiguous() and getattr(val, "fake_mode", None) is not None
                and i not in mutated and node not in returned and order is None
                and spec.dtype == spec.graph_dtype == val.dtype):
            groups[val.dtype].append((val.numel(), i))
    best = None
    for dtype, members in groups.items():
        if len(members) < count:
            continue
        chosen = sorted(members)[:count]
        cost = sum(numel for numel, _ in chosen) * dtype.itemsize
        if best is None or cost < best[0]:
            best = (cost, dtype, sorted(i for _, i in chosen))
    if best is None:
        return None
    _cost, dtype, chosen = best
    packed, offset = [], 0
    for i in chosen:
        numel = _val(placeholders[i]).numel()
        packed.append((i, offset, numel))
        offset += numel
    kept = tuple(i for i in range(len(placeholders)) if i not in set(chosen))
    name = f"{lowered.name}_packed"
    # Found by the region's module and the packing, without building the packed graph (a
    # twentieth of a second for the demo model's backward, in a process whose lowerings all
    # come from the cache).
    key = "packed-" + _lowering_cache.derived_key("packed", lowered.cache_key, repr(packed),
                                                   str(dtype))
    entry = _lowering_cache.lookup(key)
    packed_lowered = _from_cache_entry(entry, name) if entry is not None else None
    if not isinstance(packed_lowered, LoweredGraph):
        packed_gm = _graph_with_packed_inputs(gm, placeholders, kept, packed, dtype, offset)
        try:
            packed_lowered = lower(packed_gm, name=name)
        except LoweringError:
            return None
        _lowering_cache.store(key, _cache_entry(packed_lowered))
    if len(packed_lowered.input_specs) + len(packed_lowered.result_specs) > max_tensors:
        return None
    return _InputPacking(packed_lowered, kept, tuple(packed), dtype, offset)


def _graph_with_packed_inputs(gm, placeholders, kept, packed, dtype, numel):
    """A copy of ``gm`` whose placeholders are the ``kept`` ones, then one 1-D tensor of
    ``dtype`` and ``numel`` elements from which each of the ``packed`` inputs is sliced."""
    aten = torch.ops.aten
    graph = torch.fx.Graph()
    env = {}
    for i in kept:
        env[placeholders[i]] = graph.placeholder(placeholders[i].name)
        env[placeholders[i]].meta = dict(placeholders[i].meta)
    first = _val(placeholders[packed[0][0]])
    buffer = graph.placeholder("packed_inputs")
    with first.fake_mode:
        buffer.meta["val"] = torch.empty(numel, dtype=dtype, device=first.device)
    for i, offset, size in packed:
        val = _val(placeholders[i])
        piece = graph.call_function(aten.slice.Tensor, (buffer, 0, offset, offset + size))
        view = graph.call_function(aten.view.default, (piece, list(val.shape)))
        with first.fake_mode:
            piece.meta["val"] = buffer.meta["val"].narrow(0, offset, size)
            view.meta["val"] = piece.meta["val"].view(val.shape)
        env[placeholders[i]] = view
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda m: env[m])
    return torch.fx.GraphModule(gm, graph)


def _strided_outputs(outputs):
    """``[(i, stride)]`` for the outputs whose traced value is dense but not contiguous (a
    transpose, a permutation): those get the traced strides, which eager ops after the region
    may depend on (a random op draws in memory order)."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    found = []
    for i, node in enumerate(outputs):
        val = _val(node)
        if (isinstance(val, torch.Tensor) and not val.is_contiguous()
                and dense(val)):
            found.append((i, tuple(val.stride())))
    return found


def _is_shared_scalar(node, shared):
    """Whether ``node`` computes a scalar from the graph's inputs and other such scalars only
    (an optimizer's ``-lr``, a bias correction): parts that use it are still independent."""
    if _mutates_input(node) or is_random(node.target):
        return False  # writes, or draws: it must run once
    val = _val(node)
    if isinstance(val, torch.Tensor):
        if val.numel() > 1:
            return False
    elif not isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat)):
        return False  # a tuple of results, or nothing known of it
    return all(m.op in ("placeholder", "get_attr") or m in shared for m in node.all_input_nodes)


def _components(gm, shared=frozenset()):
    """The graph's independent parts: lists of call_function nodes (those in ``shared`` left
    out) that share no value but the graph's inputs and ``shared``, in order of first node."""
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n not in shared]
    parent = {n: n for n in nodes}

    def root(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in nodes:
        for m in n.all_input_nodes:
            if m in parent:
                parent[root(n)] = root(m)
        if _mutates_input(n):
            # The input it writes: whatever else reads it must run in the same launch, or a
            # launch before this one could see it written already.
            for m in n.all_input_nodes:
                if m.op == "placeholder":
                    for user in m.users:
                        if user in parent:
                            parent[root(n)] = root(user)
    groups = {}
    for n in nodes:
        groups.setdefault(root(n), []).append(n)
    return list(groups.values())


def _copy_shared_scalars(gm):
    """``gm``, or a copy of it in which each independent part computes the scalars it shares
    with others itself (an optimizer step's ``-lr`` once per parameter rather than once for
    all), so that parts become independent and can run in different launches."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    shared = set()
    for n in graph.nodes:
        if n.op == "call_function" and _is_shared_scalar(n, shared):
            shared.add(n)
    components = _components(torch.fx.GraphModule(gm, graph), shared)
    if not shared or len(components) < 2:
        return gm
    for component in components:
        copies = {}

        def copy_of(m, before):
            if m.op == "placeholder":
                return m
            if m not in copies:
                inputs = {a: copy_of(a, before) for a in m.all_input_nodes}
                with graph.inserting_before(before):
                    copies[m] = graph.node_copy(m, lambda a: inputs[a])
            return copies[m]

        for n in component:
            for m in list(n.all_input_nodes):
                if m in shared or m.op == "get_attr":
                    n.replace_input_with(m, copy_of(m, component[0]))
    for n in reversed(list(graph.nodes)):
        if (n in shared or n.op == "get_attr") and not n.users:
            graph.erase_node(n)
    return torch.fx.GraphModule(gm, graph)


def _mutates_input(node):
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _pack_components(gm, max_tensors):
    """``{node name: piece}`` grouping whole independent parts into pieces of at most
    ``max_tensors`` inputs and results each (a part too large alone is a piece of its own, cut
    again later); None when the graph is one part."""
    components = _components(gm)
    if len(components) < 2:
        return None
    output = gm.graph.output_node()
    pieces, inputs, results = {}, set(), 0
    index = 0
    for component in components:
        own_inputs = {m for n in component for m in n.all_input_nodes if m.op == "placeholder"}
        # Results: what the graph returns, and the inputs it writes (the module's aliased
        # results).
        own_results = sum(1 for n in component if output in n.users or _mutates_input(n))
        if pieces and len(inputs | own_inputs) + results + own_results > max_tensors:
            index, inputs, results = index + 1, set(), 0
        inputs |= own_inputs
        results += own_results
        for n in component:
            pieces[n.name] = index
    return pieces if index > 0 else None


def _split_in_pieces(gm, max_tensors):
    """``gm`` cut into pieces whose modules pass at most ``max_tensors`` tensors, every piece a
    :class:`LoweredSubmodule` (cut again while its module is too large). Independent parts of
    the graph stay whole, packed together (one launch per group of parameters of an optimizer
    step, rather than one per few operators); a graph of one part is cut in two by node order.
    Raises LoweringError if a single node is too large."""
    from torch.fx.passes.split_module import split_module

    nodes = _op_nodes(gm.graph)
    if len(nodes) < 2:
        raise LoweringError(f"one node ({nodes[0].name if nodes else '?'}) has more than "
                            f"{max_tensors} tensors: more than one launch passes")
    gm = _copy_shared_scalars(gm)
    nodes = _op_nodes(gm.graph)
    assigned = _pack_components(gm, max_tensors)
    if assigned is None:
        assigned = {n.name: (0 if i < len(nodes) // 2 else 1) for i, n in enumerate(nodes)}
    last = [0]

    def piece(node):  # getitems and views follow the node before them
        last[0] = assigned.get(node.name, last[0])
        return last[0]

    split = split_module(gm, gm, piece, keep_original_order=True)
    for name, child in list(split.named_children()):
        setattr(split, name, LoweredSubmodule(child, lower(child, name=name),
                                              max_tensors=max_tensors))
    return split


def _op_nodes(graph):
    return [n for n in graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def _known_partitions(work, names):
    """The partitions ``names`` (lists of node names) lists, as the partitioner's Partition
    objects over ``work``'s nodes; None when there are none or they do not fit the graph."""
    from torch.fx.passes.infra.partitioner import Partition

    if not isinstance(names, list):
        return None
    nodes = {n.name: n for n in work.graph.nodes}
    try:
        return [Partition(id=i, nodes=[nodes[name] for name in part])
                for i, part in enumerate(names)]
    except (KeyError, TypeError):
        return None


def partition(gm, example_inputs=None, *, executor=None, prefix="lowered_", max_tensors=None):
    """Splits ``gm`` into StableHLO-lowered regions and eager nodes.

    Returns ``(split_gm, report)``: ``split_gm`` is a new GraphModule (``gm`` is left as it is)
    whose lowered regions are :class:`LoweredSubmodule` children named ``<prefix><i>`` (each
    runs with ``executor``, or eagerly while it is None: set their ``executor`` later to
    choose; a region whose module would pass more than ``max_tensors`` tensors runs as pieces
    that each pass fewer), every other node running eagerly as in ``gm``; ``report`` is a
    :class:`PartitionReport`.
    """
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    if importlib.util.find_spec("torch_mlir") is None:
        raise LoweringError(f"torch-mlir is not installed ({_TORCH_MLIR_HINT})")
    _ensure_metadata(gm, example_inputs)
    gm, draws = draw_dropout_masks_outside(gm)
    replays = sum(1 for n in gm.graph.nodes
                  if n.op == "call_function" and n.target is draw_bernoulli_from_state)
    if draws:
        _ensure_metadata(gm, example_inputs)  # the new nodes' values
    support = _Lowerable()
    # An earlier partition of this graph (this process or another): its verdicts by node, and
    # the partitions they made, which the partitioner then need not propose again.
    partition_key = "partition-" + _lowering_cache.graph_key(gm)
    known = _lowering_cache.lookup(partition_key) or {}
    known_supported = known.get("supported", {})
    known_partitions = known.get("partitions")
    if isinstance(known.get("reasons"), dict):
        support.reasons.update(known["reasons"])
    decided = {}

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            ok = known_supported.get(node.name)
            if not isinstance(ok, bool) or node.name in support.exact_unsupported:
                ok = support.is_node_supported(submodules, node)
            decided[node.name] = ok
            return ok

    total_nodes = len(_counted_nodes(gm.graph))
    for _attempt in range(total_nodes + 1):  # one pass is the rule; each retry keeps nodes out
        decided.clear()
        graph = torch.fx.Graph()
        out = graph.graph_copy(gm.graph, {})
        graph.output(out)
        work = torch.fx.GraphModule(gm, graph)
        partitioner = CapabilityBasedPartitioner(work, Support(), allows_single_node_partition=True)
        partitions = _known_partitions(work, known_partitions) if _attempt == 0 else None
        from_cache = partitions is not None
        if partitions is None:
            partitions = partitioner.propose_partitions()
        proposed = [[n.name for n in p.nodes] for p in partitions]
        split = partitioner.fuse_partitions(partitions, prefix=prefix)
        failed = []
        for node in list(split.graph.nodes):
            if node.op != "call_module" or not node.target.startswith(prefix):
                continue
            sub = getattr(split, node.target)
            try:
                lowered = lower(sub, name=node.target)
            except LoweringError as exc:
                failed.append((sub, exc))
                continue
            setattr(split, node.target, LoweredSubmodule(sub, lowered, executor, max_tensors))
        if not failed:
            break
        # A region that does not lower though each op did alone: find the nodes that do not
        # lower with their own arguments, and keep them out next time.
        for sub, exc in failed:
            found = False
            for n in _op_nodes(sub.graph):
                ok, why = _Lowerable.probe(n)
                if not ok:
                    support.exact_unsupported.add(n.name)
                    support.reasons[_op_name(n.target)] = why
                    found = True
            if not found:  # only the region as a whole fails: run all of it eagerly
                for n in _op_nodes(sub.graph):
                    support.exact_unsupported.add(n.name)
                    support.reasons.setdefault(_op_name(n.target),
                                               f"lowers alone, not in its region: {exc}")
    else:
        raise LoweringError("partitioning did not settle: " + str(failed[0][1]))
    if not from_cache:
        _lowering_cache.store(partition_key, {"supported": decided, "reasons": support.reasons,
                                              "partitions": proposed})

    lowered_nodes, eager = 0, collections.Counter()
    counted = set(_counted_nodes(split.graph))
    for node in split.graph.nodes:
        if node.op == "call_module" and isinstance(getattr(split, node.target),
                                                   LoweredSubmodule):
            lowered_nodes += len(_op_nodes(getattr(split, node.target).graph_module.graph))
        elif node in counted:
            eager[_node_name(node)] += 1
    submodules = [n.target for n in split.graph.nodes
                  if n.op == "call_module" and isinstance(getattr(split, n.target),
                                                          LoweredSubmodule)]
    reasons = {k: v for k, v in support.reasons.items() if k in eager}
    return split, PartitionReport(total=total_nodes, lowered=lowered_nodes,
                                  eager=sum(eager.values()), eager_ops=dict(eager),
                                  submodules=submodules, reasons=reasons, draws=draws,
                                  replays=replays)

