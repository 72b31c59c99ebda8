"""torch.compile's on-disk caches keyed on the installed torch_hal as well as on torch.

Inductor's FX graph cache and AOTAutograd's cache key a compiled graph on torch's own sources,
the graph and the configuration, but not on the kernels an out-of-tree backend registers. Those
decide what AOTAutograd traces for the device (an autograd or autocast kernel of the bridge is
traced into the graph, where torch's decomposition is used otherwise), so after torch_hal changes
a cached graph can be one the installed bridge would no longer produce: other random draws, an
operator it no longer has. :func:`install` adds a digest of the installed package (its Python
files and shared libraries) to ``torch.compiler.config.cache_key_tag``, which both caches put in
their keys; a tag the user set (``TORCH_COMPILE_CACHE_KEY_TAG``) is kept in front of it.
"""

import hashlib
import os

__all__ = ["install", "package_digest", "TAG_PREFIX"]

TAG_PREFIX = "torch_hal-"
_DIGEST_LENGTH = 16  # hex digits: a tag, not a signature


def package_digest(directory=None):
    """SHA-256 (first 16 hex digits) of the torch_hal package in ``directory`` (default: the
    installed one): its ``*.py`` files, its extension modules and the libraries under ``lib/``,
    by name and content. About 10 ms; called once per process."""
    directory = directory or os.path.dirname(os.path.abspath(__file__))
    paths = []
    for sub in ("", "lib"):
        folder = os.path.join(directory, sub)
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and (name.endswith(".py") or ".so" in name):
                paths.append(path)
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(os.path.relpath(path, directory).encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
        digest.update(b"\0")
    return digest.hexdigest()[:_DIGEST_LENGTH]


def install(_module=None):
    """Appends ``torch_hal-<digest>`` to ``torch.compiler.config.cache_key_tag`` (joined to a tag
    already there with "+"). Idempotent. torch_hal calls it when Dynamo is imported, before the
    first cache lookup."""
    from torch.compiler import config

    tag = config.cache_key_tag
    if TAG_PREFIX in tag:
        return
    ours = TAG_PREFIX + package_digest()
    config.cache_key_tag = f"{tag}+{ours}" if tag else ours
