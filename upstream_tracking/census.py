#!/usr/bin/env python3
"""Census of CUDA hardcoding in PyTorch's Python sources.

    python3 upstream_tracking/census.py [TREE] [--series] [--series-dir DIR] [--list WHAT]
                                        [--json FILE] [--markdown]
    python3 upstream_tracking/census.py --compare OLD_TREE NEW_TREE [--series-dir DIR]
                                        [--new-series-dir DIR]

TREE is a torch tree: a ``site-packages`` directory, a torch package directory or a PyTorch
checkout (default: the installed torch). The census prints first its headline: the sites outside
allowlisted code on the paths an out-of-tree (PrivateUse1) device takes when it trains with DDP,
FSDP, AMP and torch.compile (``TRAINING_PATHS`` less ``TRAINING_EXCLUDED``: torch.amp,
torch.autograd, torch.nn but nn.DataParallel, torch.optim, torch.utils.data, activation
checkpointing, torch.distributed but RPC, pipelining and debugging tools, and the compile stack's
Dynamo, AOTAutograd, Inductor, FX, fake tensors, decompositions and prims), by area and by
category. Then it prints the same for every area (the eager runtime, torch.distributed, the
compile stack, the test utilities, benchmarks and tools) with their total, the sites by area and
category, and the compile stack classified: its sites by category with the parts of the tree
that hold them, and its allowlisted sites (CUDA-specific code generation: CUDA/CUTLASS/CuTe DSL/
ROCm templates, per-architecture Triton template configurations, CUDA graphs, Dynamo's CUDA
interface) by the allowlist's reason, so that its counts are device-generic code.

With ``--series`` it also applies the patch series (``--series-dir``, default ``patches/``; a
release's series is in ``patches/VERSION/``, and its ``series`` file may name patch files
elsewhere, e.g. ``../0001-...patch``) to a temporary copy of the files it changes, prints every
count before -> after the series with the change split into sites *removed*, *moved* into
allowlisted helpers and *added* (``80 -> 49 (-31: 23 removed, 8 moved)``), and then prints

* the claims of each patch (``census_claims.txt`` of the series directory, else
  ``patches/census_claims.txt``, which a release's series shares: the claims of a patch it does
  not carry are skipped): the sites the patch removes, as ``path::scope category``, with their
  counts before and after the series; a claimed site must be there before, in a file the patch
  changes, and gone after;
* the sites the series moves into allowlisted helpers: a claimed site is *moved*, not removed,
  when after the series its scope calls a function it did not call before and a scope of that
  name holds an allowlisted site of the same category that the series added (0005 moves
  ``cudaHostRegister`` into ``_register_host_memory``, 0012 the ``_initialized`` probe into
  ``_device_module_initialized``): the hardcoding still runs, from allowlisted code;
* the sites the series removes that no patch claims, and the sites it adds (outside allowlisted
  code, and in allowlisted code with the allowlist's reason);
* the sites left in the eager runtime and torch.distributed, grouped as *tracked* (entries of
  ``census_tracked.txt`` naming an item of ``TRACKED.md``, whose reason is printed) or
  *unclassified*, and the allowlisted sites of the same areas, grouped by the allowlist's reason.

With ``--series`` the exit status is 1 when a claim fails, a removed site is unclaimed or a site
in the eager runtime or torch.distributed is neither allowlisted nor tracked. The compile stack
and the test utilities are counted and classified by category, not site by site.

``--compare OLD_TREE NEW_TREE`` counts two releases (2.13.0 and 2.14.1) and applies to each its
series (OLD_TREE: ``--series-dir``; NEW_TREE: ``--new-series-dir``, default
``SERIES_DIR/VERSION``, e.g. ``patches/2.14.1``; "n/a" where that has no ``series`` file yet).
Per area and category (the training paths first) it prints the count in each release,
upstream's change between them, what each release's series changes on it and the count of the
new release with its series; then the removed/moved/added split of each series. The exit status
is 1 only when a series does not apply.

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
                              categories (it is also a dispatch key, a module name, ...), a
                              call argument among them (cuda-string-argument)
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
                              counts. From 2.14 the no-argument ``is_autocast_enabled()``
                              answers for the current accelerator (pytorch/pytorch#191916) and
                              no longer counts (the release is read from ``torch/version.py``)

and, widened by "Follow upstream" item 6:

  cuda-string-argument        a plain "cuda" passed to a call, positionally or as a keyword, or
                              as a branch of a conditional expression there (``t.to("cuda")``,
                              ``torch.autocast("cuda")``, ``get_device_module("cuda")``,
                              ``device="cuda"``), one site per argument; not the attribute name
                              of ``getattr``/``hasattr``/``setattr`` (``getattr(torch.version,
                              "cuda")`` is the CUDA version) nor text given to a ``str`` method
                              (``name.replace("cuda", ...)``)
  cuda-module-reference       ``torch.cuda`` or ``torch.cuda.X`` used as a value, not called
                              (``isinstance(s, torch.cuda.Stream)``, ``torch.cuda.Event``,
                              ``fn = torch.cuda.current_device``, ``getattr(torch, "cuda")``); not
                              in type annotations, ``typing.cast``'s type or under ``if
                              TYPE_CHECKING:``
  cuda-binding-call           a call of a ``torch._C._cuda*`` binding (``_cuda_getDeviceCount``,
                              the caching allocator's ``_cuda_*`` functions, ...)
  gpu-types-check             Inductor's ``is_gpu(...)`` and ``x in GPU_TYPES``: the GPU types
                              are CUDA, XPU, MPS and MTIA, never the PrivateUse1 device
  nccl-backend-comparison     a comparison with the NCCL backend's name: "nccl" or ``X.NCCL``
                              (``Backend.NCCL``, ``BackendType.NCCL``), also in a tuple/list
                              (``backend in (Backend.NCCL, Backend.XCCL)``)
  cuda-visible-devices        the string "CUDA_VISIBLE_DEVICES" (reading or setting CUDA's device
                              visibility)
  cuda-enum-member            ``DeviceType.CUDA``, ``ProfilerActivity.CUDA``,
                              ``ProfilerState.CUDA`` (any prefix), unless in a list that also
                              names ``PrivateUse1``; ``DispatchKey.CUDA`` registers CUDA's own
                              kernel and does not count
  cpu-only-codegen            in Inductor (``torch/_inductor/``) only: a comparison with "cpu"
                              (``device.type == "cpu"``) or ``is_cpu(...)`` / ``.is_cpu()`` /
                              ``.is_cpu``: the CPU standing for "generates C++ kernels", which a
                              PrivateUse1 device with a C++ code generator needs answered for it
                              too (the compile patches 0016, 0017, 0021 replace these). Not
                              counted: a CPU test beside the device-generic question (an ``or``
                              with ``generates_cpp(...)``, ``get_current_backend(...) == "cpp"``
                              or ``isinstance(..., CppScheduling)``) or in a function whose
                              return value asks it: it is that question's fast path

A node is counted once: a CUDA device in a comparison is a cuda-device-comparison, as a
parameter default a default-device-cuda, as a dict key a cuda-dict-key, and not also a
cuda-device-literal; a "cuda" argument of ``torch.device()`` is its cuda-device-literal;
``torch.cuda`` in ``getattr(torch, name, torch.cuda)`` or ``getattr(torch.cuda,
"_initialized")`` belongs to that call's category.

Sites in device-specific modules (``torch/cuda``, cuDNN, hipify, ...) and sites listed in
``census_allowlist.txt`` (legitimately CUDA-specific, e.g. NCCL-only branches, CUDA-specific code
generation) are counted as ``allowlisted`` and kept out of the totals. The rest is grouped by
area: the eager runtime (which the series targets), torch.distributed, the compile stack
(``torch._inductor``, ``torch._dynamo``, ...), the test utilities and benchmarks and tools.
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import fnmatch
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
    # widened (Follow upstream, item 6)
    "cuda-string-argument",
    "cuda-module-reference",
    "cuda-binding-call",
    "gpu-types-check",
    "nccl-backend-comparison",
    "cuda-visible-devices",
    "cuda-enum-member",
    "cpu-only-codegen",
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
# the release from which a no-device form answers for the current accelerator, not CUDA: 2.14's
# torch.is_autocast_enabled() (pytorch/pytorch#191916, in C++); the census reads the release of
# the tree it scans (torch/version.py)
AUTOCAST_ACCELERATOR_SINCE = {"is_autocast_enabled": (2, 14)}


# functions whose second argument is an attribute name, and str methods: a "cuda" there is text
ATTRIBUTE_FUNCTIONS = ("getattr", "hasattr", "setattr", "delattr")
STR_METHODS = ("replace", "startswith", "endswith", "split", "rsplit", "find", "rfind", "count",
               "strip", "lstrip", "rstrip", "partition", "rpartition", "removeprefix",
               "removesuffix", "join", "format")
# torch._C bindings of CUDA's runtime and caching allocator: torch._C._cuda_getDeviceCount(), ...
CUDA_BINDING = re.compile(r"(?:^|\.)_C\._cuda\w*$")
# enums whose CUDA member names CUDA's device or profiler activity (DeviceType.CUDA,
# ProfilerActivity.CUDA, ProfilerState.CUDA); DispatchKey.CUDA registers CUDA's own kernel
CUDA_ENUMS = ("DeviceType", "ProfilerActivity", "ProfilerState")
# Inductor's code generator: a test for the CPU there decides how kernels are generated (C++ or
# not), which a PrivateUse1 device with a C++ code generator needs answered for it too
CODEGEN_DIR = "torch/_inductor/"
# the questions that answer "does this device generate C++ kernels" for any device: a CPU test
# beside one of them is its fast path, not hardcoding
CPP_CODEGEN_QUERIES = ("generates_cpp", "_generates_cpp")


def area_of(rel: str) -> str:
    for name, prefixes in AREAS:
        if rel.startswith(prefixes):
            return name
    return "eager runtime"


class Visitor(ast.NodeVisitor):
    def __init__(self, rel: str, release: tuple[int, int] = (0, 0)):
        self.rel = rel
        self.release = release  # (major, minor) of the scanned torch; (0, 0) when unknown
        self.stack: list[str] = []
        self.sites: list[dict] = []
        self._keyerror_guarded = 0
        self._map_guards: list[str] = []  # keys tested with `key in ...default_device_backend_map`
        self._chain_seen: set[int] = set()
        # nodes already counted by a category that takes precedence (a torch.device("cuda") in
        # a comparison or as a parameter default is not a cuda-device-literal besides)
        self._consumed: set[int] = set()
        self._type_checking = 0  # inside `if TYPE_CHECKING:`
        # nodes of type annotations: they name types (torch.cuda.Stream), nothing runs
        self._annotations: set[int] = set()
        self._called: set[int] = set()  # the func nodes of calls (a call is not a reference)
        # Inductor: CPU tests that are the fast path of "does this device generate C++ kernels"
        # (in a function answering it, or beside the question in an `or`) are not counted
        self._codegen = rel.startswith(CODEGEN_DIR)
        self._cpp_question = 0
        self._cpu_exempt: set[int] = set()
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

    def visit_Module(self, node):
        for n in ast.walk(node):
            anns = []
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = n.args
                args = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                anns = [x.annotation for x in args if x is not None] + [n.returns]
            elif isinstance(n, ast.AnnAssign):
                anns = [n.annotation]
            for ann in anns:
                if ann is not None:
                    self._annotations.update(id(x) for x in ast.walk(ann))
        self.generic_visit(node)

    def _cpu_codegen_test(self, node) -> bool:
        """A CPU test in Inductor that counts as cpu-only-codegen (see the docstring)."""
        return self._codegen and not self._cpp_question and id(node) not in self._cpu_exempt

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
        cpp_question = self._codegen and any(
            isinstance(n, ast.Return) and n.value is not None and _asks_cpp_codegen(n.value)
            for n in ast.walk(node))
        self._cpp_question += cpp_question
        self.generic_visit(node)
        self._cpp_question -= cpp_question
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        func = ast.unparse(node.func)
        self._called.add(id(node.func))
        if func in ("cast", "typing.cast") and node.args:
            # typing.cast(torch.cuda.Stream, s): a type for the checker, like an annotation
            self._annotations.update(id(x) for x in ast.walk(node.args[0]))
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
            self._consumed.add(id(node.args[2]))
        elif (
            func in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in CUDA_PRIVATE_ATTRS
            and _names_device_module(node.args[0])
        ):
            self.add(node, "device-module-private-attr", ast.unparse(node))
            self._consumed.add(id(node.args[0]))
        elif func == "torch.device" and _cuda_device_expr(node) and id(node) not in self._consumed:
            self.add(node, "cuda-device-literal", ast.unparse(node))
            self.consume(node)
        elif (
            name in AUTOCAST_CUDA_FORMS
            and func in (name, f"torch.{name}", f"torch._C.{name}", f"_C.{name}")
            and (AUTOCAST_CUDA_FORMS[name] is None
                 or (len(node.args) == AUTOCAST_CUDA_FORMS[name] and not node.keywords))
            and self.release < AUTOCAST_ACCELERATOR_SINCE.get(name, (99, 0))
        ):
            self.add(node, "autocast-without-device", ast.unparse(node))
        elif CUDA_BINDING.search(func):
            self.add(node, "cuda-binding-call", ast.unparse(node))
        elif name == "is_gpu" and isinstance(node.func, (ast.Name, ast.Attribute)):
            self.add(node, "gpu-types-check", ast.unparse(node))
        elif name == "is_cpu" and self._cpu_codegen_test(node):
            self.add(node, "cpu-only-codegen", ast.unparse(node))
        # "cuda" handed to a function: a device type chosen for the callee (t.to("cuda"),
        # torch.autocast("cuda"), get_device_module("cuda"), device="cuda"); one site per
        # argument. Not an attribute name (getattr(torch.version, "cuda") is the CUDA version;
        # getattr(torch, "cuda") is a cuda-module-reference) nor text given to a str method
        # (name.replace("cuda", ...))
        args = [*node.args, *(k.value for k in node.keywords)]
        if func in ATTRIBUTE_FUNCTIONS and len(node.args) >= 2:
            if ast.unparse(node.args[0]) == "torch" and _plain_cuda_strings(node.args[1]):
                self.add(node, "cuda-module-reference", ast.unparse(node))
            args = [a for a in args if a is not node.args[1]]
        elif isinstance(node.func, ast.Attribute) and name in STR_METHODS:
            args = []
        for arg in args:
            for s in _plain_cuda_strings(arg):
                if id(s) not in self._consumed:
                    self.add(node, "cuda-string-argument", ast.unparse(node))
                    self._consumed.add(id(s))
        self.generic_visit(node)

    def visit_Constant(self, node):
        if (
            isinstance(node.value, str)
            and CUDA_INDEXED.fullmatch(node.value)
            and id(node) not in self._consumed
        ):
            self.add(node, "cuda-device-literal", repr(node.value))
        elif node.value == "CUDA_VISIBLE_DEVICES":
            self.add(node, "cuda-visible-devices", repr(node.value))

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
        dotted = _dotted(node)
        load = isinstance(node.ctx, ast.Load)
        if node.attr in CUDA_PRIVATE_ATTRS and load and _names_device_module(node.value):
            self.add(node, "device-module-private-attr", ast.unparse(node))
            self._consumed.add(id(node.value))
        elif node.attr == "is_cuda" and load and not _names_class(node.value):
            self.add(node, "is-cuda-attribute", ast.unparse(node))
        elif dotted is not None and _is_cuda_module(dotted):
            # torch.cuda or torch.cuda.X as a value: handed on, compared, stored, subclassed
            # (torch.cuda.Stream, torch.cuda.current_device as a callback); the shorter names
            # inside the chain (torch.cuda) are the same reference and are not visited
            if (
                load
                and not self._type_checking
                and not {id(node)} & (self._called | self._consumed | self._annotations)
            ):
                self.add(node, "cuda-module-reference", dotted)
            return
        elif (
            node.attr == "CUDA"
            and dotted is not None
            and dotted.split(".")[-2] in CUDA_ENUMS
            and id(node) not in self._consumed
        ):
            self.add(node, "cuda-enum-member", dotted)
        elif (
            node.attr == "is_cpu"
            and load
            and id(node) not in self._called  # is_cpu(): counted as the call
            and self._cpu_codegen_test(node)
        ):
            self.add(node, "cpu-only-codegen", ast.unparse(node))
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
            # `device.type == "cpu" or get_current_backend(device.type) == "cpp"`: the CPU test
            # is the fast path of the question asked of every device
            if self._codegen and any(_asks_cpp_codegen(v) for v in node.values):
                for v in node.values:
                    self._cpu_exempt.update(id(n) for n in ast.walk(v))
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
        elif any(_names_nccl(c) for c in operands):
            self.add(node, "nccl-backend-comparison", ast.unparse(node))
        elif any((_dotted(c) or "").endswith("GPU_TYPES") for c in operands):
            self.add(node, "gpu-types-check", ast.unparse(node))
        elif "cpu" in consts and self._cpu_codegen_test(node):
            self.add(node, "cpu-only-codegen", ast.unparse(node))
        self.generic_visit(node)

    def _collection(self, node):
        # [DeviceType.CUDA, DeviceType.PrivateUse1, ...]: the CUDA member is one of a list that
        # serves the PrivateUse1 device too (as device-list-without-pu1 does not count such lists)
        members = [e for e in node.elts if isinstance(e, ast.Attribute)]
        if any(e.attr == "PrivateUse1" for e in members):
            self._consumed.update(id(e) for e in members if e.attr == "CUDA")
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


def _plain_cuda_strings(node) -> list:
    """The plain "cuda" strings of a call argument: the argument itself or a branch of a
    conditional expression ("cuda" if ... else "cpu")."""
    branches = [node.body, node.orelse] if isinstance(node, ast.IfExp) else [node]
    return [b for b in branches if isinstance(b, ast.Constant) and b.value == "cuda"]


def _dotted(node) -> str | None:
    """a.b.c for a chain of names and attributes, else None (a call or subscript inside)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _names_nccl(node) -> bool:
    """"nccl", Backend.NCCL (any X.NCCL), or a tuple/list/set of names with one of them."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_nccl(e) for e in node.elts)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.lower() == "nccl"
    return isinstance(node, ast.Attribute) and node.attr == "NCCL"


def _asks_cpp_codegen(node) -> bool:
    """Whether node asks if a device's registered code generator is Inductor's C++ one:
    generates_cpp(x), get_current_backend(...) == "cpp", isinstance(x, CppScheduling)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            name = ast.unparse(n.func).rsplit(".", 1)[-1]
            if name in CPP_CODEGEN_QUERIES:
                return True
            if name in ("isinstance", "issubclass") and len(n.args) == 2 and (
                    "CppScheduling" in ast.unparse(n.args[1])):
                return True
        if (
            isinstance(n, ast.Compare)
            and len(n.ops) == 1
            and isinstance(n.ops[0], ast.Eq)
            and isinstance(n.left, ast.Call)
            and ast.unparse(n.left.func).endswith("get_current_backend")
            and isinstance(n.comparators[0], ast.Constant)
            and n.comparators[0].value == "cpp"
        ):
            return True
    return False


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
    code: str = ""  # ~TEXT: only sites whose code contains TEXT (two decisions in one scope)

    def matches(self, site: dict) -> bool:
        """path::scope matches the scope and the scopes nested in it; path::=scope only the
        scope itself (a class body without its methods); a scope with a wildcard
        (path::CUDA*) is matched with fnmatch, against the scope and each enclosing one."""
        f = self.file
        same_file = site["path"] == f or (f.endswith("/") and site["path"].startswith(f))
        if not (same_file and self.category in (site["category"], "*")):
            return False
        if self.code and self.code not in site["code"]:
            return False
        if self.scope.startswith("="):
            return site["scope"] == self.scope[1:]
        if self.scope == "*":
            return True
        if "*" in self.scope:
            parts = site["scope"].split(".")
            return any(fnmatch.fnmatchcase(".".join(parts[:i]), self.scope)
                       for i in range(1, len(parts) + 1))
        return site["scope"] == self.scope or site["scope"].startswith(self.scope + ".")

    @property
    def where(self) -> str:
        return self.file + ("" if self.scope == "*" else f"::{self.scope}")


def _read_rules(path: Path, item_first: bool = False, item_last: bool = False) -> list[Rule]:
    """Entries ``[ITEM] path[::scope] category [~TEXT] [ITEM]  # reason``; a comment block above a
    group of entries is their reason (a comment after an entry overrides it). ~TEXT narrows the
    entry to the sites whose code contains TEXT (no spaces)."""
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
        code = ""
        if fields and fields[-1].startswith("~"):
            code = fields.pop()[1:]
        loc, category = fields
        file, _, scope = loc.partition("::")
        out.append(Rule(file, scope or "*", category, comment.strip() or " ".join(reason), item,
                        code))
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


def _source_files(root: Path):
    """root's torch/**/*.py files, relative to root, in a stable order."""
    for dirpath, dirnames, filenames in os.walk(root / "torch"):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                yield (Path(dirpath) / f).relative_to(root).as_posix()


def scan(root: Path, allow, calls: dict | None = None, only=None) -> list[dict]:
    """The sites of root's torch/**/*.py files (with only: of those paths), each with its area
    ("allowlisted" for sites in device-specific modules or matched by allow). With calls, also
    fills calls[(path, scope)] with the names of the functions each scope calls (for
    moved_sites)."""
    sites = []
    release = release_of(halpatch.torch_version(root))
    for rel in _source_files(root) if only is None else sorted(only):
        p = root / rel
        if not p.is_file():
            continue
        try:
            tree = ast.parse(p.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        v = Visitor(rel, release)
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


def copy_sources(src_root: Path, dest: Path, only=None):
    """Copies src_root's torch/**/*.py files (with only: those of the paths that exist, and
    torch/version.py, which names the release) under dest."""
    rels = _source_files(src_root) if only is None else [*only, "torch/version.py"]
    for rel in rels:
        s = src_root / rel
        if rel.endswith(".py") and s.is_file():
            d = dest / rel
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


class SeriesError(Exception):
    """The series does not apply to the tree."""


def scan_after_series(root: Path, series_dir: Path, allow, before: list[dict],
                      calls_before: dict) -> tuple[list, list[dict], dict]:
    """(patches, sites, calls) of root with the series of series_dir applied, on a temporary
    copy of the files the series changes (the other files' sites are those of before)."""
    _, patches = halpatch.read_series(series_dir)
    touched = [p for p in halpatch.all_paths(patches) if p.startswith("torch/")]
    with tempfile.TemporaryDirectory(prefix="census-") as td:
        copy_sources(root, Path(td), touched)
        r = subprocess.run(
            [sys.executable, str(REPO / "patches" / "tools" / "halpatch.py"), "--series-dir",
             str(series_dir), "apply", "--mode", "tree", td],
            capture_output=True, text=True)
        if r.returncode != 0:
            raise SeriesError((r.stdout + r.stderr).strip())
        calls = {k: v for k, v in calls_before.items() if k[0] not in touched}
        patched = scan(Path(td), allow, calls, only=touched)
    # the unchanged files' sites in their order, each changed file's new sites in its place
    by_path: dict[str, list[dict]] = collections.defaultdict(list)
    for s in patched:
        by_path[s["path"]].append(s)
    after: list[dict] = []
    for s in before:
        if s["path"] not in touched:
            after.append(s)
        elif s["path"] in by_path:
            after.extend(by_path.pop(s["path"]))
    for sites in by_path.values():  # files without a site before (or new files)
        after.extend(sites)
    return patches, after, calls


def series_base_version(series_dir: Path) -> str | None:
    comments, _ = halpatch.read_series(series_dir)
    return halpatch.series_base(comments).get("base-version")


def release_of(version: str | None) -> tuple[int, int]:
    """2.14.1+cu130 -> (2, 14); (0, 0) when unknown (a synthetic tree without torch/version.py)."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def public_version(version: str | None) -> str:
    """2.14.1+cu130 -> 2.14.1."""
    return (version or "unknown").split("+", 1)[0]


AREA_NAMES = [a for a, _ in AREAS]
# the order of the tables: what the series targets first
AREA_ORDER = ["eager runtime", "distributed", "compile stack", "test utilities",
              "benchmarks and tools"]
assert sorted(AREA_ORDER) == sorted(AREA_NAMES)
FOCUS = ("eager runtime", "distributed")

# The headline: the code an out-of-tree (PrivateUse1) device runs when it trains with DDP, FSDP,
# AMP and torch.compile. A site is on these paths when its file starts with one of
# TRAINING_PATHS and with none of TRAINING_EXCLUDED, in one of TRAINING_AREAS; allowlisted code
# (CUDA-specific code generation among it) never counts.
TRAINING_PATHS = (
    # eager: autocast and GradScaler, autograd (backward, save_on_cpu), modules and functional
    # (DDP's module is torch/nn/parallel/distributed.py), optimizers and their foreach/fused
    # grouping, the DataLoader, activation checkpointing, the device helpers DDP calls
    # (torch._utils), the accelerator API, seeding, and saving/loading checkpoints
    "torch/amp/", "torch/autograd/", "torch/nn/", "torch/optim/", "torch/utils/data/",
    "torch/utils/checkpoint.py", "torch/utils/_foreach_utils.py", "torch/_utils.py",
    "torch/accelerator/", "torch/random.py", "torch/serialization.py",
    # distributed: c10d, DDP's comm hooks and join, FSDP and FSDP2 (fully_shard), DTensor (under
    # FSDP2), distributed checkpoint and state dicts, ShardedTensor (FSDP's sharded state
    # dicts), ZeRO, torchrun (run.py, launcher, elastic)
    "torch/distributed/",
    # torch.compile: Dynamo, AOTAutograd, Inductor (its CUDA-specific code generation is
    # allowlisted), FX, fake tensors, decompositions and prims, higher-order ops, custom ops
    "torch/_dynamo/", "torch/_functorch/", "torch/_inductor/", "torch/fx/",
    "torch/_subclasses/", "torch/_decomp/", "torch/_refs/", "torch/_prims/",
    "torch/_prims_common/", "torch/_higher_order_ops/", "torch/_library/", "torch/_guards.py",
    "torch/compiler/", "torch/_meta_registrations.py", "torch/utils/_triton.py",
)
TRAINING_EXCLUDED = (
    # nn.DataParallel's modules (not DDP; DataParallel is blocked off CUDA in C++: TRACKED.md C8)
    "torch/nn/parallel/data_parallel.py", "torch/nn/parallel/parallel_apply.py",
    "torch/nn/parallel/replicate.py", "torch/nn/parallel/comm.py",
    # RPC and what runs over it (distributed autograd, RemoteModule) and the autograd-aware
    # collectives of torch.distributed.nn, pipelining, the single-process LocalTensor simulator,
    # the experimental _dist2, the flight recorder and debug servers
    "torch/distributed/rpc/", "torch/distributed/autograd/", "torch/distributed/nn/",
    "torch/distributed/pipelining/", "torch/distributed/_local_tensor/",
    "torch/distributed/_dist2.py", "torch/distributed/flight_recorder/",
    "torch/distributed/debug/",
    # torch.compile's debugging and packaging tools: the minifier, the benchmark harness of a
    # generated module, AOTInductor's eager kernels and packages, functorch's benchmark helpers
    "torch/_dynamo/repro/", "torch/_inductor/wrapper_benchmark.py",
    "torch/_inductor/aoti_eager.py", "torch/_inductor/package/",
    "torch/_functorch/benchmark_utils.py",
)
TRAINING_AREAS = ("eager runtime", "distributed", "compile stack")


def on_training_path(site: dict) -> bool:
    return (site["area"] in TRAINING_AREAS and site["path"].startswith(TRAINING_PATHS)
            and not site["path"].startswith(TRAINING_EXCLUDED))


def _n(sites, pred) -> int:
    return sum(1 for s in sites if pred(s))


def _flow_text(b: int, a: int, flow, pred) -> str:
    """"(-31: 23 removed, 8 moved)": the change and the series' flow of the sites pred selects
    (flow: the (removed, moved, added) site lists; parts that are 0 are left out)."""
    if flow is None:
        return ""
    counted = zip((_n(part, pred) for part in flow), ("removed", "moved", "added"))
    parts = [f"{n} {what}" for n, what in counted if n]
    return f"({a - b:+d}: {', '.join(parts)})" if parts else _delta(b, a).lstrip()


def _print_rows(rows, before, after, flow, indent="  "):
    """rows: (name, pred on a site); prints before [-> after (change: flow)]."""
    width = max(len(name) for name, _ in rows) + 2
    for name, pred in rows:
        b = _n(before, pred)
        if after is None:
            print(f"{indent}{name:<{width}}{b:>6}")
        else:
            a = _n(after, pred)
            print(f"{indent}{name:<{width}}{b:>6} -> {a:<6}" + _flow_text(b, a, flow, pred))


def _area_pred(area):
    return lambda s: s["area"] == area


def _category_rows(sites_lists, pred):
    """(category, predicate) for the categories that pred's sites have in any of the lists."""
    present = {s["category"] for sites in sites_lists if sites for s in sites if pred(s)}
    return [(cat, lambda s, cat=cat: pred(s) and s["category"] == cat)
            for cat in CATEGORIES if cat in present]


def print_headline(before, after=None, flow=None):
    """First the training paths (TRAINING_PATHS) by area and category, then every area outside
    allowlisted code (the test utilities included) and the total; flow: the series' (removed,
    moved, added) site lists, whose counts follow each change."""
    what = "before -> after the series" if after is not None else "sites"
    print()
    print("headline: CUDA hardcoding on the paths an out-of-tree device takes in DDP, FSDP, AMP "
          f"and torch.compile training, outside allowlisted code ({what})")
    rows = [(area, lambda s, area=area: on_training_path(s) and s["area"] == area)
            for area in TRAINING_AREAS]
    _print_rows(rows + [("training paths", on_training_path)], before, after, flow)
    print("  by category, training paths:")
    _print_rows(_category_rows((before, after), on_training_path), before, after, flow, "    ")

    print()
    print(f"every area, outside allowlisted code ({what})")
    in_areas = lambda s: s["area"] in AREA_NAMES  # noqa: E731
    focus = lambda s: s["area"] in FOCUS  # noqa: E731
    _print_rows([(area, _area_pred(area)) for area in AREA_ORDER]
                + [("eager runtime + distributed", focus)], before, after, flow)
    print("  by category, all areas:")
    _print_rows(_category_rows((before, after), in_areas), before, after, flow, "    ")
    tb = _n(before, in_areas)
    if after is None:
        print(f"total outside allowlisted code: {tb}; eager runtime + distributed: "
              f"{_n(before, focus)}; training paths: {_n(before, on_training_path)}")
        return
    ta = _n(after, in_areas)
    removed, moved, added = (len(part) for part in flow)
    fb, fa = _n(before, focus), _n(after, focus)
    print(f"total outside allowlisted code: {tb} -> {ta} ({ta - tb:+d}): {removed} removed, "
          f"{moved} moved into allowlisted helpers, {added} added; eager runtime + distributed: "
          f"{fb} -> {fa} {_flow_text(fb, fa, flow, focus)}")


def _directory(rel: str) -> str:
    """The part of the tree a site is in, for the compile stack's classification: the file or
    directory under torch/_inductor, torch/_dynamo, ..., else under torch/."""
    parts = rel.split("/")
    deep = parts[1] in ("_inductor", "_dynamo", "_functorch", "_higher_order_ops")
    return "/".join(parts[:3] if deep else parts[:2])


def print_compile_stack(before, after, allow, top: int = 4):
    """The compile stack classified: its device-generic sites by category, each with the parts
    of the tree that hold most of them, and its allowlisted sites by the allowlist's reason
    (CUDA-specific code generation, CUDA graphs, ...)."""
    compile_stack = _area_pred("compile stack")
    print()
    print("compile stack, device-generic code by category (where most of the sites are)" +
          (" before -> after the series" if after is not None else ""))
    rows = _category_rows((before, after), compile_stack)
    width = max([len(c) for c, _ in rows] or [0]) + 2
    for cat, pred in rows:
        b = _n(before, pred)
        where = collections.Counter(_directory(s["path"]) for s in before if pred(s))
        if after is not None:
            a = _n(after, pred)
            count = f"{b:>5} -> {a:<5}"
        else:
            count = f"{b:>5}"
        print(f"  {cat:<{width}}{count} " +
              ", ".join(f"{d} {n}" for d, n in where.most_common(top)))
    allowed = [s for s in before if s["area"] == "allowlisted"
               and area_of(s["path"]) == "compile stack"]
    by_reason = collections.Counter(
        (r.reason if (r := first_match(s, allow)) else "device-specific module")
        for s in allowed)
    print(f"  allowlisted in the compile stack: {len(allowed)} sites (census_allowlist.txt)")
    for reason, n in by_reason.most_common():
        print(f"    {n:>4}  {reason[:100]}{'...' if len(reason) > 100 else ''}")


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
    category that the series added (e.g. 0005's _register_host_memory). The hardcoding then
    still runs, from allowlisted code: it was moved, not removed. A helper's allowlisted site
    that was there before does not make a move: 0017 asks get_current_backend() beside its CPU
    test, and that function's own CPU branch (allowlisted) is no copy of the test it replaced."""
    helpers: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for h in removed_sites(after, before):
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


def check_claims(claims: list[Rule], patches, before: list[dict], after: list[dict],
                 release_series: bool = False):
    """Rows (patch, claim, before, after, problem) and the list of problems. With
    release_series (a release's series sharing the main series' claims), a claim of a patch the
    series does not carry is a row without a patch (None), not a problem."""
    by_number = {p.number: p for p in patches}
    rows, problems = [], []
    claimed_patches = {c.item for c in claims}
    for p in patches:
        if p.number not in claimed_patches:
            problems.append(f"{p.number}: no entry in census_claims.txt")
    for c in claims:
        p = by_number.get(c.item)
        if p is None:
            if release_series:
                rows.append((None, c, None, None, ""))
            else:
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


def report_series(before, after, claims, tracked, items, allow, patches, moved=(),
                  claims_name="patches/census_claims.txt",
                  release_series: bool = False) -> int:
    """Prints claims, moved, unclaimed and added sites, remaining and allowlisted sites; returns
    1 on problems."""
    problems: list[str] = []
    rows, claim_problems = check_claims(claims, patches, before, after, release_series)
    problems += claim_problems
    moved = list(moved)
    moved_to = {id(s): h for s, h in moved}
    print()
    print(f"claims of the series ({claims_name}): sites before -> after")
    not_carried = sorted({c.item for p, c, *_ in rows if p is None})
    if not_carried:
        print(f"  not carried by this series (claims skipped): {', '.join(not_carried)}")
    for p, c, b, a, problem in rows:
        if p is None:
            continue
        if c.file == "-":
            print(f"  {p.number}  (no census site: {c.reason})")
            continue
        n_moved = sum(1 for s, _ in moved if c.matches(s))
        verdict = "ok" if not problem else f"FAILED: {problem}"
        if n_moved and not problem:
            verdict += f", {n_moved} of them moved into an allowlisted helper"
        print(f"  {p.number}  {c.where} [{c.category}]  {b} -> {a}  {verdict}")
    claimed_ok = sum(1 for p, c, _b, _a, problem in rows
                     if p is not None and c.file != "-" and not problem)
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


@dataclasses.dataclass
class Release:
    """One tree of --compare: its sites as released and, with its series, after it."""

    version: str
    root: Path
    series_dir: Path | None
    before: list[dict]
    after: list[dict] | None = None
    flow: tuple | None = None  # (removed, moved, added) site lists
    patches: int = 0
    note: str = ""  # why there is no "after"


def census_release(root: Path, series_dir: Path | None, allow) -> Release:
    calls_before: dict = {}
    before = scan(root, allow, calls_before)
    rel = Release(public_version(halpatch.torch_version(root)), root, series_dir, before)
    if series_dir is None or not (series_dir / "series").is_file():
        rel.note = f"no series for {rel.version} ({series_dir}/series does not exist)"
        return rel
    try:
        patches, after, calls_after = scan_after_series(root, series_dir, allow, before,
                                                        calls_before)
    except (SeriesError, halpatch.HalpatchError) as e:
        rel.note = f"the series of {series_dir} does not apply to {root}: {e}"
        return rel
    rel.after, rel.patches = after, len(patches)
    rel.flow = series_flow(before, after, moved_sites(before, after, calls_before, calls_after))
    return rel


def print_compare(old: Release, new: Release):
    """Per area and category: the count in each release, upstream's change between them, and
    what each release's series changes on it (outside allowlisted code)."""
    def series_text(rel):
        if rel.after is None:
            return f"{rel.version}: {rel.note}"
        return f"{rel.version}: {rel.series_dir} ({rel.patches} patches)"

    print(f"compare: torch {old.version} ({old.root}) and {new.version} ({new.root}), "
          "sites outside allowlisted code")
    print(f"  series on {series_text(old)}")
    print(f"  series on {series_text(new)}")
    print(f"  upstream: {new.version} - {old.version}; series on X: what X's series changes "
          "on X; n/a: no series applied")
    heads = [old.version, new.version, "upstream", f"series on {old.version}",
             f"series on {new.version}", f"{new.version} + series"]
    widths = [max(8, len(h) + 2) for h in heads]
    name_width = max(len(c) for c in CATEGORIES) + 6

    def cells(pred):
        ob, nb = _n(old.before, pred), _n(new.before, pred)
        os_ = _n(old.after, pred) - ob if old.after is not None else None
        na = _n(new.after, pred) if new.after is not None else None
        values = [str(ob), str(nb), f"{nb - ob:+d}",
                  "n/a" if os_ is None else f"{os_:+d}",
                  "n/a" if na is None else f"{na - nb:+d}",
                  "n/a" if na is None else str(na)]
        return "".join(f"{v:>{w}}" for v, w in zip(values, widths))

    def row(name, pred, indent):
        print(f"{indent}{name:<{name_width - len(indent)}}{cells(pred)}")

    lists = (old.before, old.after, new.before, new.after)
    print(f"{'':<{name_width}}" + "".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
    print("headline: the training paths (DDP, FSDP, AMP, torch.compile)")
    for area in TRAINING_AREAS:
        pred = lambda s, area=area: on_training_path(s) and s["area"] == area  # noqa: E731
        row(area, pred, "  ")
        for cat, cpred in _category_rows(lists, pred):
            row(cat, cpred, "    ")
    row("training paths", on_training_path, "  ")
    print("every area")
    for area in AREA_ORDER:
        row(area, _area_pred(area), "  ")
        for cat, cpred in _category_rows(lists, _area_pred(area)):
            row(cat, cpred, "    ")
    row("eager runtime + distributed", lambda s: s["area"] in FOCUS, "  ")
    row("total", lambda s: s["area"] in AREA_NAMES, "  ")
    print()
    print("what each series does (removed, moved into allowlisted helpers, added):")
    for rel in (old, new):
        if rel.after is None:
            print(f"  {rel.version}: n/a ({rel.note})")
            continue
        for name, pred in (("training paths", on_training_path),
                           ("eager runtime + distributed", lambda s: s["area"] in FOCUS),
                           ("total", lambda s: s["area"] in AREA_NAMES)):
            b, a = _n(rel.before, pred), _n(rel.after, pred)
            print(f"  {rel.version} {name}: {b} -> {a} {_flow_text(b, a, rel.flow, pred)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree", nargs="?", help="torch tree (default: the installed torch)")
    ap.add_argument("--series", action="store_true",
                    help="also count after applying the series, check the claims, classify "
                    "what is left")
    ap.add_argument("--series-dir", type=Path, default=REPO / "patches",
                    help="the series to apply (default: patches/; patches/VERSION/ holds a "
                    "release's series)")
    ap.add_argument("--compare", nargs=2, metavar=("OLD_TREE", "NEW_TREE"),
                    help="count two releases and what each one's series changes: OLD_TREE with "
                    "--series-dir, NEW_TREE with --new-series-dir")
    ap.add_argument("--new-series-dir", type=Path,
                    help="the series of NEW_TREE (default: SERIES_DIR/VERSION, e.g. "
                    "patches/2.14.1, when it has a series file)")
    ap.add_argument("--allowlist", type=Path, default=HERE / "census_allowlist.txt")
    ap.add_argument("--tracked", type=Path, default=HERE / "census_tracked.txt")
    ap.add_argument("--tracked-md", type=Path, default=HERE / "TRACKED.md")
    ap.add_argument("--claims", type=Path, help="default: SERIES_DIR/census_claims.txt, else "
                    "patches/census_claims.txt")
    ap.add_argument("--list", choices=("all", "removed", "moved", "added", "remaining"),
                    help="print the sites (remaining: not allowlisted, eager runtime + distributed)")
    ap.add_argument("--json", type=Path, help="write the sites and counts as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    args = ap.parse_args(argv)
    # absolute: halpatch runs patch(1) on the series' files from a staging directory
    args.series_dir = args.series_dir.resolve()
    if args.new_series_dir:
        args.new_series_dir = args.new_series_dir.resolve()
    allow = load_allowlist(args.allowlist)

    if args.compare:
        if args.tree or args.series:
            ap.error("--compare takes its two trees; no TREE or --series with it")
        old_root, new_root = (halpatch.resolve_target(t, "tree").root for t in args.compare)
        old = census_release(old_root, args.series_dir, allow)
        new_dir = args.new_series_dir or (
            args.series_dir / public_version(halpatch.torch_version(new_root)))
        new = census_release(new_root, new_dir, allow)
        print_compare(old, new)
        # a missing series is a state (a rebase not started); one that does not apply is an error
        failed = [r for r in (old, new) if r.after is None and "does not apply" in r.note]
        return 1 if failed else 0

    root = halpatch.resolve_target(args.tree or halpatch.installed_torch_root(), "tree").root
    version = halpatch.torch_version(root)
    calls_before: dict = {}
    before = scan(root, allow, calls_before)
    after = None
    patches: list = []
    moved: list = []
    flow = None
    if args.series:
        _, patches = halpatch.read_series(args.series_dir)
        base = series_base_version(args.series_dir)
        if base and public_version(version) != base:
            print(f"note: {args.series_dir}/series is based on {base}, the tree is torch "
                  f"{version}; a release's series is in {args.series_dir}/VERSION/")
        states = halpatch.series_status(root, patches)
        if any(s != "not applied" for s, _ in states):
            print(f"note: {root} already has series patches applied: " +
                  ", ".join(f"{p.number}={s}" for p, (s, _) in zip(patches, states)))
        try:
            patches, after, calls_after = scan_after_series(root, args.series_dir, allow,
                                                            before, calls_before)
        except SeriesError as e:
            print(e)
            return 1
        moved = moved_sites(before, after, calls_before, calls_after)
        flow = series_flow(before, after, moved)

    cb = counts(before)
    ca = counts(after) if after is not None else None
    print(f"census of torch {version} ({root})")
    print_headline(before, after, flow)
    print()
    if args.markdown:
        print_markdown(cb, ca)
    else:
        print_table("sites by area and category" + (" (before -> after the series)" if ca else ""),
                    cb, ca)
    print_compile_stack(before, after, allow)

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
    claims_file = args.claims or args.series_dir / "census_claims.txt"
    if not claims_file.exists() and not args.claims:
        claims_file = REPO / "patches" / "census_claims.txt"
    # a release's series (patches/VERSION/, below the main series) shares the main series'
    # claims; it may leave out a patch that upstream made unnecessary
    release_series = (args.series_dir.resolve().parent / "series").is_file()
    return report_series(before, after, load_claims(claims_file), load_tracked(args.tracked),
                         tracked_items(args.tracked_md), allow, patches, moved,
                         claims_name=_shown_path(claims_file), release_series=release_series)


def _shown_path(path):
    """A path relative to the repository where it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


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
