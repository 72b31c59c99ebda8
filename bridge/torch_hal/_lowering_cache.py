"""StableHLO lowerings kept on disk, so a new process compiling the same graphs skips torch-mlir.

Lowering a graph through torch-mlir costs tens of milliseconds per region, and a compiled model's
partitioning lowers every region and probes every distinct operator: seconds per model, spent
again in every new process, where Trainium's NEFF cache (and the emulator's executable cache)
already make the device side a cache hit. :func:`lookup` and :func:`store` keep what
:func:`torch_hal.stablehlo.lower` returns, or the LoweringError it raised, in
``TORCH_HAL_STABLEHLO_CACHE`` (a directory; ``0`` turns the cache off), by default
``torch-hal/stablehlo`` under ``$XDG_CACHE_HOME`` or ``~/.cache``.

An entry is named by the SHA-256 of the graph's code, the tensors it reads from attributes, the
dtype, shape and strides of each placeholder, and the versions of torch, torch-mlir and the
installed torch_hal (its digest: a changed lowering is a new entry). It holds JSON, written to a
private file and renamed into place, so processes filling one entry at once are safe. An entry
that does not parse is ignored (and overwritten); a cache that cannot be written is skipped.
"""

import hashlib
import json
import os
import tempfile

import torch
import torch.fx

__all__ = ["graph_key", "lookup", "store", "directory"]

_FORMAT = 1
_versions = None


def directory():
    """The cache directory, or None when ``TORCH_HAL_STABLEHLO_CACHE`` is ``0``."""
    configured = os.environ.get("TORCH_HAL_STABLEHLO_CACHE")
    if configured == "0":
        return None
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch-hal", "stablehlo")


def _toolchain():
    global _versions
    if _versions is None:
        from importlib import metadata

        from . import _cache_key

        try:
            torch_mlir = metadata.version("torch-mlir")
        except metadata.PackageNotFoundError:
            torch_mlir = "none"
        _versions = (f"format {_FORMAT}; torch {torch.__version__}; torch-mlir {torch_mlir}; "
                     f"torch_hal {_cache_key.package_digest()}")
    return _versions


def _describe(value):
    if isinstance(value, torch.Tensor):
        return f"tensor {value.dtype} {tuple(value.shape)} {tuple(value.stride())}"
    if isinstance(value, torch.fx.GraphModule):
        return f"graph {value.code}"
    return f"{type(value).__name__} {value!r}"


def _tensor_bytes(tensor):
    """A real tensor's bytes, read outside the fake mode AOTAutograd compiles under."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        return raw.numpy().tobytes()


def graph_key(gm):
    """The cache key (hex) of lowering ``gm``, whose placeholders carry ``meta['val']``."""
    from torch._subclasses.fake_tensor import FakeTensor

    digest = hashlib.sha256(_toolchain().encode() + b"\0")
    digest.update(gm.code.encode() + b"\0")
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            digest.update(f"{node.name}: {_describe(node.meta.get('val'))}\n".encode())
        elif node.op == "get_attr":
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            digest.update(f"{node.target}: {_describe(value)}\n".encode())
            if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
                digest.update(_tensor_bytes(value))
    return digest.hexdigest()


def derived_key(*parts):
    """The cache key (hex) of a lowering named by ``parts`` (strings: a module's cache key and
    what was done to it) rather than by its graph, under this toolchain."""
    digest = hashlib.sha256(_toolchain().encode())
    for part in parts:
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()


def _path(key):
    root = directory()
    return None if root is None else os.path.join(root, key[:2], key + ".json")


def lookup(key):
    """The entry stored under ``key`` (a dict), or None."""
    path = _path(key)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and entry.get("format") == _FORMAT else None


def store(key, entry):
    """Stores ``entry`` (a JSON-serialisable dict) under ``key``; nothing if the cache is off or
    cannot be written."""
    path = _path(key)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(entry, format=_FORMAT), f)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
