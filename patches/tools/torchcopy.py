"""Private copies of the installed torch package, for patching without touching the system's.

A copy is a directory holding ``torch/``; putting it first on ``PYTHONPATH`` makes ``import torch``
load it. Python sources are copied (the series edits them); every other file (the shared
libraries, mostly) is hard-linked when the file system allows it, else copied. ``patch`` and
``halpatch.py apply`` write new files and rename them over the old ones, so a hard link is never
written through.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import halpatch  # noqa: E402


def make_copy(dest: str | Path, source_root: str | Path | None = None) -> Path:
    """Copies ``<source_root>/torch`` (default: the installed torch) to ``<dest>/torch``."""
    src = Path(source_root) if source_root else halpatch.installed_torch_root()
    src_torch = src / "torch"
    dest = Path(dest)
    dst_torch = dest / "torch"
    if dst_torch.exists():
        raise FileExistsError(dst_torch)
    dest.mkdir(parents=True, exist_ok=True)
    can_link = True
    for dirpath, dirnames, filenames in os.walk(src_torch):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        rel = Path(dirpath).relative_to(src_torch)
        out_dir = dst_torch / rel
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in filenames:
            s, d = Path(dirpath) / f, out_dir / f
            if s.is_symlink():
                os.symlink(os.readlink(s), d)
            elif f.endswith((".py", ".pyi")) or not can_link:
                shutil.copy2(s, d)
            else:
                try:
                    os.link(s, d)
                except OSError:
                    can_link = False
                    shutil.copy2(s, d)
    return dest


def python_env(copy_root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a subprocess that must import torch from ``copy_root``."""
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(copy_root) + (os.pathsep + old if old else "")
    env["HALPATCH_TORCH_COPY"] = str(copy_root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if extra:
        env.update(extra)
    return env
