"""torch.compile on neuron: dropout masks drawn outside the programs and passed in.

AWS's Neuron backend samples dropout masks outside the compiled graph and passes them in. Here
each training ``native_dropout(x, p)`` of a graph, alone or as the op of the random-state
higher-order operators (``run_and_save_rng_state`` in a forward, ``run_with_rng_state`` in the
backward that recomputes it under activation checkpointing), becomes:

- a draw, run eagerly with the device generator: :func:`draw_bernoulli` (or the variants that
  save or replay the generator's state as the operators do), exactly the numbers eager
  ``native_dropout`` draws before it scales the mask, as bytes (0 or 1: a quarter of a float32
  mask's bytes to copy to the device);
- the arithmetic on it, which lowers: the draw converted to ``x``'s dtype, ``noise = draw *
  (1 / (1 - p))`` with eager's constant (computed by the same CPU kernel eager's
  ``noise.div_(1 - p)`` runs), ``x * noise``, and the converted draw ``!= 0`` as the mask.

A draw is placed right after the random op before it (or the placeholders), so draws keep
eager's order and do not cut the lowered regions around them. Other random ops stay eager
nodes; :func:`is_random` tells them (the higher-order operators included).

The backward's replay of a checkpointed dropout draws what the forward drew from the same saved
state, so the forward's draw is kept for it (:func:`draw_bernoulli_saving_state`) and the replay
takes it (:func:`draw_bernoulli_from_state`) instead of drawing on the host and copying again.
A kept draw lives as long as the forward's saved state, one byte per element (what eager dropout
without checkpointing keeps for its backward); a replay that finds none (the state was copied
by a saved-tensor hook, or a second backward) draws from the state as before.
"""

import contextlib
import operator
import threading
import weakref

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

__all__ = ["draw_bernoulli", "draw_bernoulli_from_state", "draw_bernoulli_saving_state",
           "draw_dropout_masks_outside", "is_random", "rng_hop_name"]

# Ops that draw random numbers. They are found by the nondeterministic_seeded tag; the names
# cover ops whose tags say otherwise.
RANDOM_OP_NAMES = frozenset({
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
    "native_dropout", "normal", "poisson", "rand", "rand_like", "randint", "randint_like",
    "randn", "randn_like", "randperm", "rrelu_with_noise", "uniform", "_fused_dropout",
    "_standard_gamma", "_sample_dirichlet", "_fused_rrelu_with_noise",
})

# The higher-order operators of torch._prims.rng_prims that run an op with a saved generator
# state: (name, position of the wrapped op in their arguments).
_RNG_HOPS = {"run_and_save_rng_state": 0, "run_with_rng_state": 1}


def rng_hop_name(target):
    """``target``'s name if it is one of the random-state higher-order operators, else None."""
    if isinstance(target, torch._ops.HigherOrderOperator) and target.name() in _RNG_HOPS:
        return target.name()
    return None


def is_random(target):
    """Whether a call of ``target`` draws random numbers (a random aten op, or a random-state
    higher-order operator)."""
    if rng_hop_name(target):
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return True
    return target._schema.name.split("::")[-1] in RANDOM_OP_NAMES


def draw_bernoulli(shape, dtype, device, p):
    """A tensor of ``shape`` and ``dtype`` on ``device`` filled by ``bernoulli_(p)``: the mask
    eager ``native_dropout`` draws (same generator, same order of elements) before scaling it."""
    return torch.empty(shape, dtype=dtype, device=device).bernoulli_(p)


class _KeptDraws:
    """The forward's draws under a saved generator state, for the backward's replay: entries
    ``(weak reference to the state, what was drawn, the draw)``, each dropped when its state
    is freed or a replay takes it."""

    def __init__(self):
        # Reentrant: a state freed while the lock is held (by the collector) runs ``forget``.
        self._lock = threading.RLock()
        self._entries = {}  # id(state) -> (weakref to the state, key, draw)

    def keep(self, state, key, draw):
        ident = id(state)

        def forget(_ref, ident=ident):
            with self._lock:
                entry = self._entries.get(ident)
                if entry is not None and entry[0]() is None:
                    del self._entries[ident]

        with self._lock:
            self._entries[ident] = (weakref.ref(state, forget), key, draw)

    def take(self, state, key):
        """The draw kept for ``state`` (the same tensor, or one with equal contents) and
        ``key``, removed; None when there is none."""
        with self._lock:
            found = None
            entry = self._entries.get(id(state))
            if entry is not None and entry[0]() is state:
                found = id(state) if entry[1] == key else None
            else:
                for ident, (ref, kept_key, _draw) in list(self._entries.items()):
                    kept_state = ref()
                    if (kept_key == key and kept_state is not None
                            and kept_state.shape == state.shape
                            and kept_state.device == state.device
                            and torch.equal(kept_state, state)):
                        found = ident
                        break
            if found is None:
                return None
            return self._entries.pop(found)[2]

    def __len__(self):
        with self._lock:
            return len(self._entries)


_kept = _KeptDraws()


def draw_bernoulli_saving_state(shape, dtype, device, p):
    """``(the device generator's state, draw_bernoulli(...))``, as ``run_and_save_rng_state``
    returns the state before its op and the op's result. The draw is kept for the replay of
    the same state (:func:`draw_bernoulli_from_state`) while the state lives."""
    state = torch.get_device_module(torch.device(device).type).get_rng_state()
    draw = draw_bernoulli(shape, dtype, device, p)
    _kept.keep(state, (tuple(shape), dtype, str(torch.device(device)), p), draw)
    return state, draw


def draw_bernoulli_from_state(rng_state, shape, dtype, device, p):
    """:func:`draw_bernoulli` from the generator state ``rng_state``, the state restored after,
    as ``run_with_rng_state`` replays its op: the forward's draw from that state where it was
    kept, the same numbers."""
    kept = _kept.take(rng_state, (tuple(shape), dtype, str(torch.device(device)), p))
    if kept is not None:
        return kept
    module = torch.get_device_module(torch.device(device).type)
    current = module.get_rng_state()
    module.set_rng_state(rng_state.cpu())
    try:
        return draw_bernoulli(shape, dtype, device, p)
    finally:
        module.set_rng_state(current)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _dropout_call(node):
    """``(hop name or None, x, p, train)`` of a ``native_dropout`` call, direct or wrapped in a
    random-state higher-order operator; None for any other node."""
    if node.op != "call_function":
        return None
    hop = rng_hop_name(node.target)
    args = node.args[_RNG_HOPS[hop]:] if hop else (node.target, *node.args)
    kwargs = node.kwargs
    if not args or args[0] is not torch.ops.aten.native_dropout.default or len(args) < 3:
        return None
    train = args[3] if len(args) > 3 else kwargs.get("train")
    return hop, args[1], args[2], train


def _getitem_users(node):
    users = list(node.users)
    if all(u.op == "call_function" and u.target is operator.getitem for u in users):
        return users
    return None


def _rewritable(node):
    call = _dropout_call(node)
    if call is None:
        return False
    hop, x, p, train = call
    xval = _val(x)
    if (train is False or not isinstance(p, (int, float)) or not 0 < p < 1
            or not isinstance(xval, torch.Tensor) or not xval.is_floating_point()
            or not xval.is_contiguous()):
        return False
    users = _getitem_users(node)
    if users is None:
        return False
    if hop == "run_and_save_rng_state":  # (state, (output, mask))
        return all(u.args[1] == 0 or _getitem_users(u) is not None for u in users)
    return True


def draw_dropout_masks_outside(gm):
    """``gm``, or a copy of it in which each rewritable ``native_dropout`` (training, 0 < p < 1,
    ``x`` contiguous and floating, results read by getitem) is a draw and the arithmetic on it
    (see the module's docstring). Returns ``(graph module, number of draws)``."""
    if not any(_rewritable(n) for n in gm.graph.nodes):
        return gm, 0
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    last_random = placeholders[-1] if placeholders else None
    draws = 0
    for node in list(graph.nodes):
        if not _rewritable(node):
            if node.op == "call_function" and is_random(node.target):
                last_random = node
            continue
        draw = _rewrite(graph, node, last_random)
        draws += 1
        if rng_hop_name(node.target) != "run_with_rng_state":  # a replay restores the state
            last_random = draw
        graph.erase_node(node)
    return torch.fx.GraphModule(gm, graph), draws


def _rewrite(graph, node, last_random):
    """Puts the draw and the arithmetic of the dropout call ``node`` into ``graph`` and moves
    ``node``'s readers onto them (``node`` is left without readers). Returns the draw's node."""
    aten = torch.ops.aten
    hop, x, p, _train = _dropout_call(node)
    xval = _val(x)
    keep = 1.0 - p
    with unset_fake_temporarily():  # compiling runs under the graph's fake mode
        scale = torch.ones(1, dtype=xval.dtype).div_(keep).item()  # eager's noise.div_(1 - p)
    what = (list(xval.shape), torch.uint8, xval.device, keep)
    state = None
    if hop == "run_with_rng_state":
        # After the saved state's node (and the placeholders): the replay needs nothing else.
        state = node.args[0]
        with graph.inserting_before(_later(graph, state, last_random).next):
            draw = graph.call_function(draw_bernoulli_from_state, (state, *what))
    else:
        first = last_random.next if last_random is not None else next(iter(graph.nodes))
        with graph.inserting_before(first):
            if hop == "run_and_save_rng_state":
                saved = graph.call_function(draw_bernoulli_saving_state, what)
                state = graph.call_function(operator.getitem, (saved, 0))
                draw = graph.call_function(operator.getitem, (saved, 1))
            else:
                draw = graph.call_function(draw_bernoulli, what)
    # The draws' values for the metadata (the arithmetic's are propagated from them): the
    # draws themselves touch the generator, which fake tensors cannot.
    mode = getattr(xval, "fake_mode", None)
    with mode if mode is not None else contextlib.nullcontext():
        draw.meta["val"] = torch.empty_like(xval, dtype=torch.uint8)
    if hop == "run_and_save_rng_state":
        state.meta["val"] = _val(node)[0]
        saved.meta["val"] = (state.meta["val"], draw.meta["val"])
    with graph.inserting_before(node):
        drawn = graph.call_function(torch.ops.prims.convert_element_type.default,
                                    (draw, xval.dtype))
        noise = graph.call_function(aten.mul.Scalar, (drawn, scale))
        out = graph.call_function(aten.mul.Tensor, (x, noise))
        # Compared after the conversion: torch-mlir 20261001 compares u8 as signed, which
        # XLA's verifier rejects.
        mask = graph.call_function(aten.ne.Scalar, (drawn, 0))
    results = (out, mask)
    for user in list(node.users):
        if hop == "run_and_save_rng_state" and user.args[1] == 0:
            user.replace_all_uses_with(state)
        elif hop == "run_and_save_rng_state":  # the op's (output, mask), read by getitems
            for inner in list(user.users):
                inner.replace_all_uses_with(results[inner.args[1]])
                graph.erase_node(inner)
        else:
            user.replace_all_uses_with(results[user.args[1]])
        graph.erase_node(user)
    return saved if hop == "run_and_save_rng_state" else draw


def _later(graph, a, b):
    """Of the nodes ``a`` and ``b`` (``b`` may be None), the one later in ``graph``."""
    if b is None:
        return a
    for n in graph.nodes:
        if n is a:
            return b
        if n is b:
            return a
    return a
