"""Private copies of the installed torch package, for patching without touching the system's.

A copy lives in a virtual environment of its own (``<dest>/venv``, made with
``--system-site-packages`` so that torch's dependencies, pytest and torch_hal come from the
system): torch is copied into the environment's site-packages, which its interpreter puts before
the system's, so ``import torch`` there loads the copy. Python sources are copied (the series
edits them); every other file (the shared libraries, mostly) is hard-linked when the file system
allows it, else copied. ``patch`` and ``halpatch.py apply`` write new files and rename them over
the old ones, so a hard link is never written through.

A torch installed in a virtual environment (another release than the system's, say) is copied
into an environment that sees what that one sees: the system's site-packages only if the source
environment does, and every other entry of the source's site-packages (torch's dependencies, the
CUDA libraries of a CUDA wheel, torch_hal built for that torch) through a symbolic link beside
the copy. The links matter for more than imports: torch's shared libraries find the CUDA
libraries through ``$ORIGIN/../../nvidia/...``, relative to the copy, and nothing gigabytes big
is copied.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import halpatch  # noqa: E402


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _source_venv(src: Path) -> Path | None:
    """The virtual environment whose site-packages ``src`` is, if any."""
    for parent in src.resolve().parents:
        if (parent / "pyvenv.cfg").is_file():
            return parent
    return None


def _includes_system_site_packages(venv: Path) -> bool:
    cfg = (venv / "pyvenv.cfg").read_text()
    return re.search(r"^include-system-site-packages\s*=\s*true\s*$", cfg, re.M | re.I) is not None


def make_copy(dest: str | Path, source_root: str | Path | None = None) -> Path:
    """Makes the virtual environment ``<dest>/venv`` and copies ``<source_root>/torch`` (default:
    the installed torch) into its site-packages. Returns that site-packages directory (the copy's
    root: it holds ``torch/``; patch it in tree mode, run code with ``python_executable``)."""
    src = Path(source_root) if source_root else halpatch.installed_torch_root()
    src_torch = src / "torch"
    venv = Path(dest) / "venv"
    if venv.exists():
        raise FileExistsError(venv)
    source_venv = _source_venv(src)
    system_site = source_venv is None or _includes_system_site_packages(source_venv)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)]
                   + (["--system-site-packages"] if system_site else []), check=True)
    purelib = subprocess.run(
        [str(_venv_python(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    dest = Path(purelib)
    dst_torch = dest / "torch"
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
    if source_venv is not None:
        _link_site_entries(src, dest)
    return dest


def _link_site_entries(src: Path, dest: Path) -> None:
    """Links every entry of the source site-packages but torch (copied) into the copy's."""
    for entry in sorted(src.iterdir()):
        if entry.name in ("torch", "__pycache__") or (dest / entry.name).exists():
            continue
        os.symlink(entry.resolve(), dest / entry.name)


def python_executable(copy_root: Path) -> str:
    """The interpreter of the copy's virtual environment (``copy_root`` from ``make_copy``)."""
    for parent in Path(copy_root).parents:
        if (parent / "pyvenv.cfg").exists():
            return str(_venv_python(parent))
    raise FileNotFoundError(f"{copy_root} is not inside a virtual environment made by make_copy")


def python_env(copy_root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the copy's interpreter (``python_executable``): nothing on PYTHONPATH may
    shadow the copy."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    env["HALPATCH_TORCH_COPY"] = str(copy_root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if extra:
        env.update(extra)
    return env
