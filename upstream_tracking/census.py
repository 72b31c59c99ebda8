#!/usr/bin/env python3
"""Census of CUDA hardcoding in PyTorch's Python sources.

    python3 upstream_tracking/census.py [TREE] [--series] [--list WHAT] [--json FILE]

TREE is a torch tree: a ``site-packages`` directory, a torch package directory or a PyTorch
checkout (default: the installed torch). The census prints the sites by area and category, then
a headline: the sites outside allowlisted code of every area (the eager runtime,
torch.distributed, the compile stack, the test utilities, benchmarks and tools) and of every
category, and their total. With ``--series`` it also applies the patch series
(``patches/series``) to a temporary copy of TREE's Python sources, prints every count before ->
after the series, splits the difference of the total into sites *removed*, *moved* into
allowlisted helpers and *added*, and then prints

* the claims of each patch (``patches/census_claims.txt``: the sites the patch removes, as
  ``path::scope category``) with their counts before and after the series; a claimed site must
  be there before, in a file the patch changes, and gone after;
* the sites the series moves into allowlisted helpers: a claimed site is *moved*, not removed,
  when after the series its scope calls a function it did not call before and a scope of that
  name holds an allowlisted site of the same category (0005 moves ``cudaHostRegister`` into
  ``_register_host_memory``, 0012 the ``_initialized`` probe into
  ``_device_module_initialized``): the hardcoding still runs, from allowlisted code;
* the sites the series removes that no patch claims, and the sites it adds (outside allowlisted
  code, and in allowlisted code with the allowlist's reason);
* the sites left in the eager runtime and torch.distributed, grouped as *tracked* (entries of
  ``census_tracked.txt`` naming an item of ``TRACKED.md``, whose reason is printed) or
  *unclassified*, and the allowlisted sites of the same areas, grouped by the allowlist's reason.

With ``--series`` the exit status is 1 when a claim fails, a removed site is unclaimed or a site
in the eager runtime or torch.distributed is neither allowlisted nor tracked. The compile stack
and the test utilities are counted in the headline and its total but are not classified.

Every ``torch/**/*.py`` file is parsed (``ast``; comments and docstrings never count) and each
site is put into one category:

  default-device-cuda         a ``device``/``device_type`` parameter defaulting to a CUDA device
                              ("cuda", "cuda:N" or ``torch.device("cuda")``)
  cuda-availability-check     ``torch.cuda.is_available()`` / ``device_count()`` deciding
                              generic behaviour
  cudart-call                 the CUDA runtime called from Python (``torch.cuda.cudart()``,
                              ``torch.cuda._pin_memory_utils``)
  cuda-module-call            any other ``torch.cuda.*`` call (synchronize, current_device, ...)
  cuda-module-fallback        ``getattr(torch, name, torch.cuda)``
  cuda-device-comparison      a comparison with a CUDA device: "cuda" (``device.type ==
                              "cuda"``, ...), "cuda:N" or ``torch.device("cuda")``
                              (``torch.device("cuda") in devices``)
  device-list-without-pu1     a literal list of device types with "cuda" but not the
                              PrivateUse1 name
  privateuse1-literal         a comparison with "privateuse1" (never the device's type)
  device-module-private-attr  a private attribute of torch.cuda (``_initialized``) expected of
                              a device module (``getattr(device_module, "_initialized", ...)``)
  device-chain-raises         an if/elif chain over device-type literals, "cuda" among them,
                              without a PrivateUse1 branch, that raises for any other device
  backend-map-lookup          ``Backend.default_device_backend_map[key]`` outside a ``try``
                              that handles the ``KeyError`` of a device without a default
                              backend and not guarded by ``key in ...default_device_backend_map``
                              (an ``if``/conditional expression test or an earlier operand of
                              ``and``)

and, widened by issue 14:

  is-cuda-attribute           a read of ``.is_cuda`` (``tensor.is_cuda``, ``storage.is_cuda``,
                              ...); ``Tensor.is_cuda`` on a class (a capitalised name: the
                              property itself, e.g. in torch.overrides) does not count
  cuda-device-literal         a CUDA device written out: ``torch.device("cuda")``,
                              ``torch.device("cuda:N")``, ``torch.device("cuda", i)``,
                              ``torch.device(type="cuda")``, and the strings "cuda:N" and
                              f"cuda:{i}" anywhere else; one site per ``torch.device`` call. A
                              plain "cuda" string counts only in the patterns of the other
                              categories (it is also a dispatch key, a module name, ...)
  cuda-module-import          ``from torch.cuda[.sub] import name`` and ``import torch.cuda.sub
                              as name`` (relative imports resolved): they bind CUDA's module
                              under another name, which the ``torch.cuda.*`` patterns no longer
                              see; a plain ``import torch.cuda`` does not count (its uses are
                              ``torch.cuda.*`` sites), nor do imports under ``if
                              TYPE_CHECKING:``
  cuda-dict-key               a dict display with a "cuda" or "cuda:N" key (one site per dict)
                              and no key naming the PrivateUse1 device
  autocast-without-device     an autocast state function called in its CUDA-implicit form:
                              ``torch.is_autocast_enabled()`` without an argument,
                              ``torch.set_autocast_enabled(flag)`` with one,
                              ``torch.get_autocast_gpu_dtype()`` / ``set_autocast_gpu_dtype()``
                              (also through ``torch._C``). The cache functions
                              (``is_autocast_cache_enabled``, ...) are the same for every device,
                              and ``is_autocast_cpu_enabled()`` & co. name their device: neither
                              counts

A node is counted once: a CUDA device in a comparison is a cuda-device-comparison, as a
parameter default a default-device-cuda, as a dict key a cuda-dict-key, and not also a
cuda-device-literal.

Sites in device-specific modules (``torch/cuda``, cuDNN, hipify, ...) and sites listed in
``census_allowlist.txt`` (legitimately CUDA-specific, e.g. NCCL-only branches) are counted as
``allowlisted`` and kept out of the totals. The rest is grouped by area: the eager runtime
(which the series targets), torch.distributed, the compile stack (``torch._inductor``,
``torch._dynamo``, ...), the test utilities and benchmarks and tools, each with its total
before -> after in the headline.
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "patches" / "tools"))
import halpatch  # noqa: E402

CATEGORIES = [
    "default-device-cuda",
    "cuda-availability-check",
    "cudart-call",
    "cuda-module-call",
    "cuda-module-fallback",
    "cuda-device-comparison",
    "device-list-without-pu1",
    "privateuse1-literal",
    "device-module-private-attr",
    "device-chain-raises",
    "backend-map-lookup",
    # widened (issue 14)
    "is-cuda-attribute",
    "cuda-device-literal",
    "cuda-module-import",
    "cuda-dict-key",
    "autocast-without-device",
]

# Modules whose job is one vendor's device: CUDA hardcoding there is by design.
DEVICE_SPECIFIC = (
    "torch/cuda/",
    "torch/backends/cuda/",
    "torch/backends/cudnn/",
    "torch/backends/cusparselt/",
    "torch/backends/nccl/",
    "torch/utils/hipify/",
    "torch/utils/cpp_extension.py",
    "torch/utils/_cuda_debug.py",
    "torch/utils/collect_env.py",
    "torch/_vendor/",
    "torch/_native/",
    "torch/sparse/_triton_ops",
    "torch/sparse/_semi_structured",
    "torch/profiler/_cupti_monitor.py",
    "torch/profiler/_cupti/",  # 2.14's CUPTI package (it replaces _cupti_monitor.py)
    "torch/distributed/_symmetric_memory/",
    "torch/nn/attention/_fa3.py",
    "torch/nn/attention/_fa4.py",
    "torch/numa/",
    "torch/utils/viz/",
)

AREAS = [
    ("compile stack", ("torch/_inductor/", "torch/_dynamo/", "torch/_functorch/", "torch/_prims",
                       "torch/_higher_order_ops/", "torch/_export/", "torch/export/", "torch/fx/",
                       "torch/_meta_registrations.py", "torch/_decomp/", "torch/_refs/",
                       "torch/_subclasses/", "torch/compiler/", "torch/_library/",
                       "torch/utils/_triton.py", "torch/utils/_pallas.py", "torch/jit/",
                       "torch/onnx/", "torch/ao/", "torch/_guards.py", "torch/_logging/",
                       "torch/_utils_internal.py", "torch/utils/_content_store.py",
                       "torch/_strobelight/", "torch/nn/attention/flex_attention.py",
                       "torch/nn/attention/experimental/")),
    ("test utilities", ("torch/testing/",)),
    ("benchmarks and tools", ("torch/utils/benchmark/", "torch/utils/bottleneck/",
                              "torch/distributed/_tools/", "torch/utils/_debug_mode/")),
    ("distributed", ("torch/distributed/",)),
    ("eager runtime", ("torch/",)),
]

DEVICE_NAMES = {"cuda", "xpu", "mps", "hpu", "mtia", "xla", "maia", "cpu", "meta", "ipu", "lazy"}
PU1_MARKERS = ("_get_privateuse1_backend_name", "_privateuse1_backend_name")
# private module attributes of torch.cuda that generic code must not expect of a device module
CUDA_PRIVATE_ATTRS = ("_initialized",)
DEVICE_MODULE_HINTS = ("device", "module", "_mod", "handle")
# exception types whose handler covers a KeyError
KEYERROR_HANDLERS = ("KeyError", "LookupError", "Exception", "BaseException")
# "cuda:0", "cuda:1", ...: a CUDA device with its index
CUDA_INDEXED = re.compile(r"cuda:\d+")
# the autocast state functions whose no-device form means CUDA: name -> the number of positional
# arguments of that form (the deprecated forms before device_type was an argument)
AUTOCAST_CUDA_FORMS = {
    "is_autocast_enabled": 0,  # torch.is_autocast_enabled(): CUDA's autocast
    "set_autocast_enabled": 1,  # torch.set_autocast_enabled(flag): CUDA's
    "get_autocast_gpu_dtype": None,  # any call: the GPU (CUDA) dtype
    "set_autocast_gpu_dtype": None,
}


def area_of(rel: str) -> str:
    for name, prefixes in AREAS:
        if rel.startswith(prefixes):
            return name
    return "eager runtime"


class Visitor(ast.NodeVisitor):
    def __init__(self, rel: str):
        self.rel = rel
        self.stack: list[str] = []
        self.sites: list[dict] = []
        self._keyerror_guarded = 0
        self._map_guards: list[str] = []  # keys tested with `key in ...default_device_backend_map`
        self._chain_seen: set[int] = set()
        # nodes already counted by a category that takes precedence (a torch.device("cuda") in
        # a comparison or as a parameter default is not a cuda-device-literal besides)
        self._consumed: set[int] = set()
        self._type_checking = 0  # inside `if TYPE_CHECKING:`
        # scope -> the names of the functions it calls (the last component: f, obj.f, mod.f)
        self.calls: dict[str, set[str]] = collections.defaultdict(set)

    @property
    def scope(self) -> str:
        return ".".join(self.stack) or "<module>"

    def consume(self, node):
        """Marks the CUDA device written out in node (_cuda_device_expr) as counted."""
        if isinstance(node, ast.IfExp):
            for branch in (node.body, node.orelse):
                if _cuda_device_string(branch):
                    self._consumed.add(id(branch))
        elif isinstance(node, ast.Call):
            self._consumed.add(id(node))
            first = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg == "type"), None)
            if first is not None:
                self.consume(first)
        else:
            self._consumed.add(id(node))

    def add(self, node, category, snippet):
        self.sites.append({
            "path": self.rel,
            "line": node.lineno,
            "scope": self.scope,
            "category": category,
            "code": snippet[:120],
        })

    def _scoped(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    def visit_ClassDef(self, node):
        self._scoped(node)

    def visit_FunctionDef(self, node):
        self.stack.append(node.name)
        a = node.args
        pos = a.posonlyargs + a.args
        pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults))
        pairs += [(x, d) for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for arg, d in pairs:
            if "device" in arg.arg and _cuda_device_expr(d):
                self.add(node, "default-device-cuda",
                         f"def {node.name}(..., {arg.arg}={ast.unparse(d)})")
                self.consume(d)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        func = ast.unparse(node.func)
        if isinstance(node.func, (ast.Name, ast.Attribute)):
            self.calls[self.scope].add(func.rsplit(".", 1)[-1])
        name = func.rsplit(".", 1)[-1]
        if func in ("torch.cuda.is_available", "torch.cuda.device_count") or func.startswith(
            "torch.cuda.amp.common.amp_definitely_not_available"
        ):
            self.add(node, "cuda-availability-check", ast.unparse(node))
        elif (
            func == "torch.cuda.cudart"
            or (".cudaHostRegister" in func and "torch.cuda.cudart" not in func)
            or func.startswith("pin_memory_utils.")
        ):
            self.add(node, "cudart-call", ast.unparse(node))
        elif "torch.cuda.cudart" in func:
            pass  # a call on torch.cuda.cudart()'s result: counted with that call
        elif func.startswith("torch.cuda.") and not func.startswith("torch.cuda.amp.autocast"):
            self.add(node, "cuda-module-call", ast.unparse(node))
        elif func == "getattr" and len(node.args) == 3 and ast.unparse(node.args[2]) == "torch.cuda":
            self.add(node, "cuda-module-fallback", ast.unparse(node))
        elif (
            func in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in CUDA_PRIVATE_ATTRS
            and _names_device_module(node.args[0])
        ):
            self.add(node, "device-module-private-attr", ast.unparse(node))
        elif func == "torch.device" and _cuda_device_expr(node) and id(node) not in self._consumed:
            self.add(node, "cuda-device-literal", ast.unparse(node))
            self.consume(node)
        elif (
            name in AUTOCAST_CUDA_FORMS
            and func in (name, f"torch.{name}", f"torch._C.{name}", f"_C.{name}")
            and (AUTOCAST_CUDA_FORMS[name] is None
                 or (len(node.args) == AUTOCAST_CUDA_FORMS[name] and not node.keywords))
        ):
            self.add(node, "autocast-without-device", ast.unparse(node))
        self.generic_visit(node)

    def visit_Constant(self, node):
        if (
            isinstance(node.value, str)
            and CUDA_INDEXED.fullmatch(node.value)
            and id(node) not in self._consumed
        ):
            self.add(node, "cuda-device-literal", repr(node.value))

    def visit_JoinedStr(self, node):
        if _cuda_device_expr(node) and id(node) not in self._consumed:
            self.add(node, "cuda-device-literal", ast.unparse(node))
        for part in node.values:  # the text parts are never a device on their own
            if isinstance(part, ast.FormattedValue):
                self.visit(part)

    def visit_Dict(self, node):
        keys = [k for k in node.keys if k is not None]
        cuda_keys = [k for k in keys if _cuda_device_expr(k)]
        if cuda_keys and not any(m in ast.unparse(k) for k in keys for m in PU1_MARKERS):
            self.add(node, "cuda-dict-key", ast.unparse(node))
            for k in cuda_keys:
                self.consume(k)
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if (
            node.attr in CUDA_PRIVATE_ATTRS
            and isinstance(node.ctx, ast.Load)
            and _names_device_module(node.value)
        ):
            self.add(node, "device-module-private-attr", ast.unparse(node))
        elif (
            node.attr == "is_cuda"
            and isinstance(node.ctx, ast.Load)
            and not _names_class(node.value)
        ):
            self.add(node, "is-cuda-attribute", ast.unparse(node))
        self.generic_visit(node)

    def visit_Try(self, node):
        guarded = any(_handles_keyerror(h) for h in node.handlers)
        self._keyerror_guarded += guarded
        for stmt in node.body:
            self.visit(stmt)
        self._keyerror_guarded -= guarded
        for part in (node.handlers, node.orelse, node.finalbody):
            for stmt in part:
                self.visit(stmt)

    visit_TryStar = visit_Try

    def visit_Subscript(self, node):
        if (
            isinstance(node.ctx, ast.Load)
            and ast.unparse(node.value).endswith("default_device_backend_map")
            and not self._keyerror_guarded
            and ast.unparse(node.slice) not in self._map_guards
        ):
            self.add(node, "backend-map-lookup", ast.unparse(node))
        self.generic_visit(node)

    def _visit_guarded(self, test, body):
        """Visits body (a node or a list of statements) with the backend-map keys that test
        checks for membership as guards."""
        keys = _map_membership_keys(test)
        self._map_guards += keys
        for n in body if isinstance(body, list) else [body]:
            self.visit(n)
        del self._map_guards[len(self._map_guards) - len(keys):]

    def visit_IfExp(self, node):
        self.visit(node.test)
        self._visit_guarded(node.test, node.body)
        self.visit(node.orelse)

    def visit_BoolOp(self, node):
        if not isinstance(node.op, ast.And):
            self.generic_visit(node)
            return
        self.visit(node.values[0])
        for i, value in enumerate(node.values[1:], 1):
            self._visit_guarded(ast.BoolOp(op=ast.And(), values=node.values[:i]), value)

    def visit_If(self, node):
        if id(node) not in self._chain_seen:
            chain = [node]
            while len(chain[-1].orelse) == 1 and isinstance(chain[-1].orelse[0], ast.If):
                chain.append(chain[-1].orelse[0])
                self._chain_seen.add(id(chain[-1]))
            last = chain[-1].orelse
            tests = [ast.unparse(c.test) for c in chain]
            devices = set()
            for c in chain:
                devices |= _compared_device_literals(c.test)
            if (
                "cuda" in devices
                and len(last) == 1
                and isinstance(last[0], ast.Raise)
                and not any(m in t for t in tests for m in PU1_MARKERS)
            ):
                self.add(node, "device-chain-raises",
                         f"if/elif over {sorted(devices)}, else: {ast.unparse(last[0])}")
        self.visit(node.test)
        type_checking = ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        self._type_checking += type_checking
        self._visit_guarded(node.test, node.body)
        self._type_checking -= type_checking
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node):
        for alias in node.names:
            if alias.name == "torch.cuda._pin_memory_utils":
                self.add(node, "cudart-call", f"import {alias.name}")
            elif _is_cuda_module(alias.name) and alias.asname and not self._type_checking:
                self.add(node, "cuda-module-import", ast.unparse(node))
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        module = _absolute_module(self.rel, node.module, node.level)
        names = [a.name for a in node.names]
        if self._type_checking:
            pass
        elif _is_cuda_module(module):
            if module == "torch.cuda" and names == ["_pin_memory_utils"]:
                self.add(node, "cudart-call", ast.unparse(node))
            else:
                self.add(node, "cuda-module-import", ast.unparse(node))
        self.generic_visit(node)

    def visit_Compare(self, node):
        operands = [node.left, *node.comparators]
        consts = [c.value for c in operands if isinstance(c, ast.Constant)]
        cuda_operands = [c for c in operands if _cuda_device_expr(c)]
        if cuda_operands:
            self.add(node, "cuda-device-comparison", ast.unparse(node))
            for c in cuda_operands:
                self.consume(c)
        elif "privateuse1" in consts:
            self.add(node, "privateuse1-literal", ast.unparse(node))
        self.generic_visit(node)

    def _collection(self, node):
        strs = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        devs = [s for s in strs if s in DEVICE_NAMES]
        if "cuda" in devs and len(devs) >= 2 and len(devs) == len(strs):
            src = ast.unparse(node)
            if not any(m in src for m in PU1_MARKERS):
                self.add(node, "device-list-without-pu1", src)
        self.generic_visit(node)

    visit_List = visit_Tuple = visit_Set = _collection


def _cuda_device_string(node) -> bool:
    """"cuda", "cuda:N" or f"cuda:{...}"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value == "cuda" or bool(CUDA_INDEXED.fullmatch(node.value))
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        head, tail = node.values
        return (isinstance(head, ast.Constant) and head.value == "cuda:"
                and isinstance(tail, ast.FormattedValue))
    return False


def _cuda_device_expr(node) -> bool:
    """A CUDA device written out: the strings of _cuda_device_string (a conditional expression
    with one of them as a branch counts) or torch.device() of one ("cuda", "cuda:N",
    ("cuda", i), type="cuda")."""
    if isinstance(node, ast.IfExp):
        return _cuda_device_string(node.body) or _cuda_device_string(node.orelse)
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.device":
        first = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == "type"), None)
        return first is not None and _cuda_device_expr(first)
    return _cuda_device_string(node)


def _is_cuda_module(module: str | None) -> bool:
    return module is not None and (module == "torch.cuda" or module.startswith("torch.cuda."))


def _absolute_module(rel: str, module: str | None, level: int) -> str | None:
    """The module an ``import`` in file rel names (relative imports resolved)."""
    if not level:
        return module
    package = rel[:-3].split("/")
    package = package[:-1]  # the file's package (an __init__.py's is its directory)
    if level > 1:
        package = package[: len(package) - (level - 1)]
    return ".".join(package + ([module] if module else []))


def _names_class(node) -> bool:
    """Tensor.is_cuda, torch.Tensor.is_cuda, TypedStorage.is_cuda: the property itself (a
    reference, e.g. in torch.overrides), not a question about an object's device."""
    last = ast.unparse(node).rsplit(".", 1)[-1]
    return last[:1].isupper()


def _names_device_module(node) -> bool:
    src = ast.unparse(node)
    return src == "torch.cuda" or any(h in src.lower() for h in DEVICE_MODULE_HINTS)


def _handles_keyerror(handler) -> bool:
    if handler.type is None:
        return True
    return any(n in ast.unparse(handler.type) for n in KEYERROR_HANDLERS)


def _map_membership_keys(test) -> list[str]:
    """The keys that test (an ``if`` test, or the operands of an ``and``) requires to be in a
    ``default_device_backend_map``: ``key in Backend.default_device_backend_map``."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    keys = []
    for part in parts:
        if (
            isinstance(part, ast.Compare)
            and len(part.ops) == 1
            and isinstance(part.ops[0], ast.In)
            and ast.unparse(part.comparators[0]).endswith("default_device_backend_map")
        ):
            keys.append(ast.unparse(part.left))
    return keys


def _compared_device_literals(test) -> set[str]:
    out = set()
    for n in ast.walk(test):
        if isinstance(n, ast.Compare):
            for c in [n.left, *n.comparators]:
                if isinstance(c, ast.Constant) and c.value in DEVICE_NAMES:
                    out.add(c.value)
    return out


@dataclasses.dataclass
class Rule:
    """One entry of census_allowlist.txt, census_tracked.txt or patches/census_claims.txt."""

    file: str
    scope: str
    category: str
    reason: str = ""  # allowlist: the comment above the entry (or after it)
    item: str = ""  # tracked: the TRACKED.md item; claims: the patch number

    def matches(self, site: dict) -> bool:
        """path::scope matches the scope and the scopes nested in it; path::=scope only the
        scope itself (a class body without its methods)."""
        f = self.file
        same_file = site["path"] == f or (f.endswith("/") and site["path"].startswith(f))
        if not (same_file and self.category in (site["category"], "*")):
            return False
        if self.scope.startswith("="):
            return site["scope"] == self.scope[1:]
        return (self.scope == "*" or site["scope"] == self.scope
                or site["scope"].startswith(self.scope + "."))

    @property
    def where(self) -> str:
        return self.file + ("" if self.scope == "*" else f"::{self.scope}")


def _read_rules(path: Path, item_first: bool = False, item_last: bool = False) -> list[Rule]:
    """Entries ``[ITEM] path[::scope] category [ITEM]  # reason``; a comment block above a group
    of entries is their reason (a comment after an entry overrides it)."""
    out: list[Rule] = []
    if not path.exists():
        return out
    reason: list[str] = []
    fresh = True  # the next comment line starts a new block
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not stripped:
            fresh = True
            continue
        if stripped.startswith("#"):
            if fresh:
                reason, fresh = [], False
            reason.append(stripped.lstrip("#").strip())
            continue
        fresh = True
        line, _, comment = raw.partition("#")
        fields = line.split()
        item = ""
        if item_first:
            item, fields = fields[0], fields[1:]
        if item_last:
            fields, item = fields[:-1], fields[-1]
        if fields == ["-"]:  # a patch that claims no census site
            out.append(Rule("-", "*", "-", comment.strip() or " ".join(reason), item))
            continue
        loc, category = fields
        file, _, scope = loc.partition("::")
        out.append(Rule(file, scope or "*", category, comment.strip() or " ".join(reason), item))
    return out


def load_allowlist(path: Path) -> list[Rule]:
    return _read_rules(path)


def load_tracked(path: Path) -> list[Rule]:
    return _read_rules(path, item_last=True)


def load_claims(path: Path) -> list[Rule]:
    return _read_rules(path, item_first=True)


def tracked_items(path: Path) -> dict[str, str]:
    """TRACKED.md: item id (the first cell of a table row: C1, T3, ...) -> why it is not a patch
    (the cell under a heading that starts with "why"; for the C++ table, what the item needs)."""
    items: dict[str, str] = {}
    if not path.exists():
        return items
    heads: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "#":
            heads = [c.lower() for c in cells]
            continue
        if not (cells and cells[0][:1] in ("C", "T") and cells[0][1:].isdigit()):
            continue
        row = dict(zip(heads, cells))
        why = next((v for h, v in row.items() if h.startswith("why")), None)
        if why is None:  # the C++ table: what it needs and its state
            why = "C++: " + "; ".join(v for h, v in row.items() if h in ("proposed change", "state"))
        items[cells[0]] = why
    return items


def allowlisted(site: dict, allow: list[Rule]) -> bool:
    if site["path"].startswith(DEVICE_SPECIFIC):
        return True
    return any(r.matches(site) for r in allow)


def first_match(site: dict, rules: list[Rule]) -> Rule | None:
    return next((r for r in rules if r.matches(site)), None)


def scan(root: Path, allow, calls: dict | None = None) -> list[dict]:
    """The sites of root's torch/**/*.py files, each with its area ("allowlisted" for sites in
    device-specific modules or matched by allow). With calls, also fills calls[(path, scope)]
    with the names of the functions each scope calls (for moved_sites)."""
    sites = []
    torch_dir = root / "torch"
    for dirpath, dirnames, filenames in os.walk(torch_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if not f.endswith(".py"):
                continue
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            try:
                tree = ast.parse(p.read_text(encoding="utf-8", errors="replace"))
            except SyntaxError:
                continue
            v = Visitor(rel)
            v.visit(tree)
            for s in v.sites:
                s["area"] = "allowlisted" if allowlisted(s, allow) else area_of(rel)
            sites.extend(v.sites)
            if calls is not None:
                for scope, names in v.calls.items():
                    calls[(rel, scope)] = names
    return sites


def counts(sites):
    c = collections.Counter()
    for s in sites:
        c[(s["area"], s["category"])] += 1
    return c


def copy_sources(src_root: Path, dest: Path):
    for dirpath, dirnames, filenames in os.walk(src_root / "torch"):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            if f.endswith(".py"):
                s = Path(dirpath) / f
                d = dest / s.relative_to(src_root)
                d.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(s, d)


AREA_NAMES = [a for a, _ in AREAS]
# the order of the tables: what the series targets first
AREA_ORDER = ["eager runtime", "distributed", "compile stack", "test utilities",
              "benchmarks and tools"]
assert sorted(AREA_ORDER) == sorted(AREA_NAMES)
FOCUS = ("eager runtime", "distributed")


def _delta(b: int, a: int) -> str:
    return f" ({a - b:+d})" if a != b else ""


def print_table(title, before, after=None):
    areas = AREA_ORDER + ["allowlisted"]
    print(title)
    width = max(len(c) for c in CATEGORIES) + 2
    for area in areas:
        rows = []
        for cat in CATEGORIES:
            b = before.get((area, cat), 0)
            a = after.get((area, cat), 0) if after is not None else None
            if b or a:
                rows.append((cat, b, a))
        if not rows:
            continue
        tb = sum(r[1] for r in rows)
        ta = sum(r[2] for r in rows) if after is not None else None
        head = f"  {area}: {tb}" + (f" -> {ta}" if after is not None else "")
        print(head)
        for cat, b, a in rows:
            if after is None:
                print(f"    {cat:<{width}}{b:>6}")
            else:
                print(f"    {cat:<{width}}{b:>6} -> {a:<6}" + _delta(b, a).lstrip())


def print_headline(before, after=None, flow=None):
    """Every area and every category outside allowlisted code (the compile stack and the test
    utilities included), with the total; flow: (removed, moved, added) counts of the series."""
    def total(c, pred):
        return sum(v for (a, cat), v in c.items() if a in AREA_NAMES and pred(a, cat))

    rows = [(area, lambda a, c, area=area: a == area) for area in AREA_ORDER]
    cats = [(cat, lambda a, c, cat=cat: c == cat) for cat in CATEGORIES]
    width = max(len(n) for n, _ in rows + cats) + 2
    what = "before -> after the series" if after is not None else "sites"
    print()
    print(f"headline: CUDA hardcoding outside allowlisted code, every area ({what})")

    def line(name, pred, indent="  "):
        b = total(before, pred)
        if after is None:
            print(f"{indent}{name:<{width}}{b:>6}")
        else:
            a = total(after, pred)
            print(f"{indent}{name:<{width}}{b:>6} -> {a:<6}" + _delta(b, a).lstrip())

    for name, pred in rows:
        line(name, pred)
    line("eager runtime + distributed", lambda a, c: a in FOCUS)
    print("  by category, all areas:")
    for name, pred in cats:
        if total(before, pred) or (after is not None and total(after, pred)):
            line(name, pred, "    ")
    tb = total(before, lambda a, c: True)
    if after is None:
        print(f"total outside allowlisted code: {tb}; eager runtime + distributed: "
              f"{total(before, lambda a, c: a in FOCUS)}")
        return
    ta = total(after, lambda a, c: True)
    fb, fa = (total(x, lambda a, c: a in FOCUS) for x in (before, after))
    removed, moved, added = flow
    print(f"total outside allowlisted code: {tb} -> {ta} ({ta - tb:+d}): {removed} removed, "
          f"{moved} moved into allowlisted helpers, {added} added; eager runtime + distributed: "
          f"{fb} -> {fa} ({fa - fb:+d})")


def site_key(s: dict) -> tuple:
    return (s["path"], s["scope"], s["category"], s["code"])


def removed_sites(before: list[dict], after: list[dict]) -> list[dict]:
    """The sites of before that after does not have (a multiset difference on path, scope,
    category and code: line numbers may move). removed_sites(after, before): the added ones."""
    remaining = collections.Counter(site_key(s) for s in after)
    out = []
    for s in before:
        if remaining[site_key(s)]:
            remaining[site_key(s)] -= 1
        else:
            out.append(s)
    return out


def _calls_in(calls: dict, site: dict) -> set[str]:
    """The functions the site's scope calls (its nested scopes included)."""
    path, scope = site["path"], site["scope"]
    out: set[str] = set()
    for (p, sc), names in calls.items():
        if p == path and (sc == scope or (scope != "<module>" and sc.startswith(scope + "."))):
            out |= names
    return out


def moved_sites(before, after, calls_before, calls_after) -> list[tuple[dict, dict]]:
    """(site, helper site) for each site outside allowlisted code that the series removed by
    routing it through an allowlisted helper: after the series the site's scope calls a function
    that it did not call before, and a scope of that name holds an allowlisted site of the same
    category (a helper the series added, e.g. 0005's _register_host_memory, or one that was
    there). The hardcoding then still runs, from allowlisted code: it was moved, not removed."""
    helpers: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for h in after:
        if h["area"] == "allowlisted":
            for name in set(h["scope"].split(".")):
                helpers[(name, h["category"])].append(h)
    by_path_before: dict[str, dict] = collections.defaultdict(dict)
    by_path_after: dict[str, dict] = collections.defaultdict(dict)
    for src, dst in ((calls_before, by_path_before), (calls_after, by_path_after)):
        for (path, scope), names in src.items():
            dst[path][(path, scope)] = names
    out = []
    for s in removed_sites(before, after):
        if s["area"] == "allowlisted":
            continue
        new_calls = (_calls_in(by_path_after[s["path"]], s)
                     - _calls_in(by_path_before[s["path"]], s))
        helper = next((h for n in sorted(new_calls) for h in helpers.get((n, s["category"]), [])),
                      None)
        if helper is not None:
            out.append((s, helper))
    return out


def series_flow(before, after, moved) -> tuple[list[dict], list[dict], list[dict]]:
    """(removed, moved, added) sites outside allowlisted code: what the series takes away, what
    it moves into allowlisted helpers and what it adds."""
    moved_ids = {id(s) for s, _ in moved}
    gone = [s for s in removed_sites(before, after) if s["area"] != "allowlisted"]
    added = [s for s in removed_sites(after, before) if s["area"] != "allowlisted"]
    return ([s for s in gone if id(s) not in moved_ids], [s for s, _ in moved], added)


def check_claims(claims: list[Rule], patches, before: list[dict], after: list[dict]):
    """Rows (patch, claim, before, after, problem) and the list of problems."""
    by_number = {p.number: p for p in patches}
    rows, problems = [], []
    claimed_patches = {c.item for c in claims}
    for p in patches:
        if p.number not in claimed_patches:
            problems.append(f"{p.number}: no entry in census_claims.txt")
    for c in claims:
        p = by_number.get(c.item)
        if p is None:
            problems.append(f"census_claims.txt: {c.item} is not a patch of the series")
            continue
        if c.file == "-":
            rows.append((p, c, None, None, ""))
            continue
        if c.category not in CATEGORIES:
            problems.append(f"{c.item}: unknown category {c.category}")
        b = sum(1 for s in before if c.matches(s))
        a = sum(1 for s in after if c.matches(s))
        problem = ""
        if b == 0:
            problem = "no such site before the series"
        elif a:
            problem = f"{a} site(s) left after the series"
        elif not any(c.file == f or (c.file.endswith("/") and f.startswith(c.file))
                     for f in p.paths):
            problem = f"patch {p.number} does not change {c.file}"
        if problem:
            problems.append(f"{c.item} {c.where} {c.category}: {problem}")
        rows.append((p, c, b, a, problem))
    return rows, problems


def _where(s: dict) -> str:
    return f"{s['path']}:{s['line']}  [{s['category']}] {s['scope']}"


def report_series(before, after, claims, tracked, items, allow, patches, moved=()) -> int:
    """Prints claims, moved, unclaimed and added sites, remaining and allowlisted sites; returns
    1 on problems."""
    problems: list[str] = []
    rows, claim_problems = check_claims(claims, patches, before, after)
    problems += claim_problems
    moved = list(moved)
    moved_to = {id(s): h for s, h in moved}
    print()
    print("claims of the series (patches/census_claims.txt): sites before -> after")
    for p, c, b, a, problem in rows:
        if c.file == "-":
            print(f"  {p.number}  (no census site: {c.reason})")
            continue
        n_moved = sum(1 for s, _ in moved if c.matches(s))
        verdict = "ok" if not problem else f"FAILED: {problem}"
        if n_moved and not problem:
            verdict += f", {n_moved} of them moved into an allowlisted helper"
        print(f"  {p.number}  {c.where} [{c.category}]  {b} -> {a}  {verdict}")
    claimed_ok = sum(1 for _, c, _b, _a, problem in rows if c.file != "-" and not problem)
    print(f"  {claimed_ok} claims verified, {len(claim_problems)} problems")

    if moved:
        print()
        print(f"sites the series moves into allowlisted helpers (counted as moved, not removed): "
              f"{len(moved)}")
        for s, h in moved:
            claim = first_match(s, claims)
            rule = first_match(h, allow)
            why = rule.reason if rule else "device-specific module"
            print(f"  {claim.item if claim else '?':<5} {_where(s)}")
            print(f"        -> {h['path']}::{h['scope']} ({why})")

    gone = removed_sites(before, after)
    unclaimed = [s for s in gone
                 if s["area"] != "allowlisted" and not any(c.matches(s) for c in claims)]
    if unclaimed:
        print()
        print("sites the series removes that no patch claims:")
        for s in unclaimed:
            print(f"  {_where(s)}: {s['code']}")
        problems.append(f"{len(unclaimed)} removed sites are not claimed")

    new_sites = removed_sites(after, before)
    added = [s for s in new_sites if s["area"] != "allowlisted"]
    if added:
        print()
        print(f"sites the series adds outside allowlisted code: {len(added)}")
        for s in added:
            print(f"  {_where(s)}: {s['code']}")
    added_allowed = [s for s in new_sites if s["area"] == "allowlisted"]
    if added_allowed:
        print()
        print(f"sites the series adds in allowlisted code (helpers the moved sites went to, "
              f"CUDA's own branches): {len(added_allowed)}")
        for s in added_allowed:
            rule = first_match(s, allow)
            print(f"  {_where(s)}: {s['code']}")
            print(f"        ({rule.reason if rule else 'device-specific module'})")

    for r in tracked:
        if r.item not in items:
            problems.append(f"census_tracked.txt: {r.where} names {r.item}, not an item of TRACKED.md")
    remaining = [s for s in after if s["area"] in FOCUS]
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    unclassified = []
    for s in remaining:
        r = first_match(s, tracked)
        if r is None:
            unclassified.append(s)
        else:
            groups[r.item].append(s)
    print()
    print(f"left in the eager runtime and torch.distributed after the series: {len(remaining)} "
          f"sites, {len(remaining) - len(unclassified)} tracked (TRACKED.md), "
          f"{len(unclassified)} unclassified")
    order = sorted(groups, key=lambda i: (i[0], int(i[1:])))
    for item in order:
        print(f"  tracked {item}: {items.get(item, '?')}")
        for s in groups[item]:
            print(f"      {_where(s)}")
    if unclassified:
        print("  unclassified (neither patched, tracked nor allowlisted):")
        for s in unclassified:
            print(f"      {_where(s)}: {s['code']}")
        problems.append(f"{len(unclassified)} unclassified sites in the eager runtime and "
                        "torch.distributed")

    allowed = [s for s in after if s["area"] == "allowlisted"
               and area_of(s["path"]) in FOCUS and not s["path"].startswith(DEVICE_SPECIFIC)]
    by_reason: dict[str, list[dict]] = collections.defaultdict(list)
    for s in allowed:
        by_reason[first_match(s, allow).reason].append(s)
    n_specific = sum(1 for s in after if s["path"].startswith(DEVICE_SPECIFIC))
    print()
    print(f"allowlisted in the eager runtime and torch.distributed (census_allowlist.txt): "
          f"{len(allowed)} sites; {n_specific} more in device-specific modules")
    for reason, sites in by_reason.items():
        print(f"  {reason}")
        for s in sites:
            mark = "  (moved here by the series)" if any(h is s for h in moved_to.values()) else ""
            print(f"      {_where(s)}{mark}")

    print()
    if problems:
        for pr in problems:
            print(f"census: {pr}")
        return 1
    print("census: every claim holds (after = 0), no removed site is unclaimed, and every site "
          "left in the eager runtime and torch.distributed is tracked or allowlisted")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", nargs="?", help="torch tree (default: the installed torch)")
    ap.add_argument("--series", action="store_true",
                    help="also count after applying the series, check the claims, classify "
                    "what is left")
    ap.add_argument("--series-dir", type=Path, default=REPO / "patches")
    ap.add_argument("--allowlist", type=Path, default=HERE / "census_allowlist.txt")
    ap.add_argument("--tracked", type=Path, default=HERE / "census_tracked.txt")
    ap.add_argument("--tracked-md", type=Path, default=HERE / "TRACKED.md")
    ap.add_argument("--claims", type=Path, help="default: SERIES_DIR/census_claims.txt")
    ap.add_argument("--list", choices=("all", "removed", "moved", "added", "remaining"),
                    help="print the sites (remaining: not allowlisted, eager runtime + distributed)")
    ap.add_argument("--json", type=Path, help="write the sites and counts as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    args = ap.parse_args(argv)

    root = halpatch.resolve_target(args.tree or halpatch.installed_torch_root(), "tree").root
    allow = load_allowlist(args.allowlist)
    version = halpatch.torch_version(root)
    calls_before: dict = {}
    calls_after: dict = {}
    before = scan(root, allow, calls_before)
    after = None
    patches = []
    if args.series:
        _, patches = halpatch.read_series(args.series_dir)
        states = halpatch.series_status(root, patches)
        if any(s != "not applied" for s, _ in states):
            print(f"note: {root} already has series patches applied: " +
                  ", ".join(f"{p.number}={s}" for p, (s, _) in zip(patches, states)))
        with tempfile.TemporaryDirectory(prefix="census-") as td:
            copy_sources(root, Path(td))
            r = subprocess.run(
                [sys.executable, str(REPO / "patches" / "tools" / "halpatch.py"), "--series-dir",
                 str(args.series_dir), "apply", "--mode", "tree", td],
                capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                return 1
            after = scan(Path(td), allow, calls_after)

    cb = counts(before)
    ca = counts(after) if after is not None else None
    moved = moved_sites(before, after, calls_before, calls_after) if after is not None else []
    flow = series_flow(before, after, moved) if after is not None else None
    print(f"census of torch {version} ({root})")
    if args.markdown:
        print_markdown(cb, ca)
    else:
        print_table("sites by area and category" + (" (before -> after the series)" if ca else ""),
                    cb, ca)
    print_headline(cb, ca, tuple(len(x) for x in flow) if flow else None)

    if args.list:
        if args.list in ("removed", "moved", "added") and after is not None:
            listed = dict(zip(("removed", "moved", "added"), flow))[args.list]
        elif args.list == "remaining":
            listed = [s for s in (after if after is not None else before) if s["area"] in FOCUS]
        else:
            listed = before
        for s in listed:
            print(f"{_where(s)}: {s['code']}")
    if args.json:
        args.json.write_text(json.dumps({
            "torch": version,
            "before": before,
            "after": after,
            "moved": [{"site": s, "helper": h} for s, h in moved],
            "added": flow[2] if flow else None,
        }, indent=1))
    if after is None:
        return 0
    claims = load_claims(args.claims or args.series_dir / "census_claims.txt")
    return report_series(before, after, claims, load_tracked(args.tracked),
                         tracked_items(args.tracked_md), allow, patches, moved)


def print_markdown(cb, ca):
    areas = AREA_ORDER + ["allowlisted"]
    hdr = "| area | category | before | after |" if ca is not None else "| area | category | sites |"
    print(hdr)
    print("|---|---|---|---|" if ca is not None else "|---|---|---|")
    for area in areas:
        for cat in CATEGORIES:
            b = cb.get((area, cat), 0)
            a = ca.get((area, cat), 0) if ca is not None else None
            if b or a:
                print(f"| {area} | {cat} | {b} |" + (f" {a} |" if ca is not None else ""))


if __name__ == "__main__":
    sys.exit(main())
