#!/usr/bin/env python3
"""halpatch: quilt-style management of the torch-hal PyTorch patch series, on git.

The series (``patches/series`` plus ``patches/NNNN-*.patch``) is kept as ``git format-patch``
files against PyTorch's release tag named in the series header. Paths inside the patches are
relative to the PyTorch repository root (``torch/...``), so one file set serves two kinds of
target:

* a PyTorch git checkout: ``apply`` runs ``git am`` (authorship, dates and messages are kept);
* an installed torch: a ``site-packages`` directory (or the ``torch`` package directory itself),
  patched with ``patch -p1``.

Commands::

    halpatch.py status  TARGET                 applied / not applied / partial, per patch
                                               (TARGET 'installed': the torch this Python imports)
    halpatch.py apply   TARGET [--check] [--reverse] [--mode auto|git|tree]
    halpatch.py workspace DIR [--from TREE]     git repo of TREE's torch sources + the series
    halpatch.py export  --repo DIR [--base REF] [--branch REF]
    halpatch.py refresh --repo DIR [--base REF] [--branch REF]
    halpatch.py lint    [--base TREE]

Each command takes ``--series-dir DIR`` before it (default: ``patches/``).

One series per supported release: ``patches/`` holds the series of the main base release,
``patches/<version>/`` the same series rebased onto another release. A number names the same
patch in every release: a release's series keeps the numbers and names of the main series (it
may skip a number whose patch it does not carry, e.g. one fixed upstream in that release), and
the per-patch tests ``tests/test_NNNN_*.py`` are shared: a series directory without a ``tests/``
directory of its own uses its parent's. ``export`` and ``refresh`` keep each patch's number
(``git format-patch`` numbers by position).

``apply`` is atomic: in tree mode every patch is first applied to a staging copy of the files the
series touches and the target is only written when all of them applied; in git mode a failing
``git am`` is aborted, which restores the original HEAD. It is idempotent: patches that are
already applied (a reverse dry run succeeds) are skipped, so a second ``apply`` is a no-op.
"""

from __future__ import annotations

import argparse
import dataclasses
import filecmp
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SERIES_DIR = Path(__file__).resolve().parent.parent
UPSTREAM_STATUS_RE = re.compile(
    r"^Upstream-Status: (Pending|Accepted|Denied|Submitted \S.*|Backport \S.*|Inappropriate \S.*)$"
)
OFFSET_RE = re.compile(r"\(offset -?\d+ lines?\)")
FUZZ_RE = re.compile(r"with fuzz \d+")
MACHINE_PATH_RE = re.compile(r"(/work/|/tmp/|/root/|/home/|site-packages/)")


class HalpatchError(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# Series and patch files


@dataclasses.dataclass
class Patch:
    name: str
    path: Path
    headers: dict[str, str]
    body: str
    diff: str
    files: list[tuple[str | None, str | None]]  # (old path, new path); None for /dev/null

    @property
    def number(self) -> str:
        return self.name.split("-", 1)[0]

    @property
    def subject(self) -> str:
        s = self.headers.get("Subject", "")
        return re.sub(r"^\[PATCH[^\]]*\]\s*", "", s)

    @property
    def paths(self) -> list[str]:
        out: list[str] = []
        for old, new in self.files:
            for p in (old, new):
                if p is not None and p not in out:
                    out.append(p)
        return out


def _strip_prefix(p: str) -> str | None:
    p = p.split("\t", 1)[0].strip()
    if p == "/dev/null":
        return None
    if p.startswith(("a/", "b/")):
        return p[2:]
    return p


def parse_patch(path: Path) -> Patch:
    text = path.read_text()
    lines = text.split("\n")
    headers: dict[str, str] = {}
    i = 0
    if lines and lines[0].startswith("From ") and not lines[0].startswith("From:"):
        i = 1  # mbox "From <sha> <date>" separator line
    last = None
    while i < len(lines) and lines[i] != "":
        line = lines[i]
        if line[:1] in (" ", "\t") and last is not None:
            headers[last] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            headers[key] = value.strip()
            last = key
        i += 1
    body_lines: list[str] = []
    i += 1
    while i < len(lines) and lines[i] != "---" and not lines[i].startswith("diff --git "):
        body_lines.append(lines[i])
        i += 1
    diff_start = None
    for j in range(i, len(lines)):
        if lines[j].startswith("diff --git ") or (
            lines[j].startswith("--- ") and j + 1 < len(lines) and lines[j + 1].startswith("+++ ")
        ):
            diff_start = j
            break
    diff = "\n".join(lines[diff_start:]) if diff_start is not None else ""
    files: list[tuple[str | None, str | None]] = []
    if diff_start is not None:
        j = diff_start
        while j < len(lines):
            if lines[j].startswith("--- ") and j + 1 < len(lines) and lines[j + 1].startswith("+++ "):
                files.append((_strip_prefix(lines[j][4:]), _strip_prefix(lines[j + 1][4:])))
                j += 2
                continue
            j += 1
    return Patch(path.name, path, headers, "\n".join(body_lines).strip("\n"), diff, files)


def read_series(series_dir: Path = SERIES_DIR) -> tuple[list[str], list[Patch]]:
    """Returns the series file's comment lines and its patches, in order."""
    series = series_dir / "series"
    if not series.exists():
        raise HalpatchError(f"no series file in {series_dir}")
    comments: list[str] = []
    patches: list[Patch] = []
    for raw in series.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            if line:
                comments.append(raw)
            continue
        parts = line.split()
        if parts[1:] not in ([], ["-p1"]):
            raise HalpatchError(f"series: only -p1 patches are supported: {raw!r}")
        path = series_dir / parts[0]
        if not path.exists():
            raise HalpatchError(f"series lists {parts[0]}, which does not exist")
        patches.append(parse_patch(path))
    return comments, patches


def series_base(comments: list[str]) -> dict[str, str]:
    """Reads ``# base-version: 2.13.0`` style comment lines of the series file."""
    out = {}
    for c in comments:
        m = re.match(r"#\s*([a-z-]+):\s*(\S.*)$", c.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def installed_release(series_dir: Path) -> str:
    """The release the series in ``series_dir`` is pinned to (``base-version``), checked against
    this Python's torch: the tools copy that torch, and another release's series would not apply
    to it. Raises SystemExit naming both otherwise."""
    comments, _ = read_series(series_dir)
    installed = torch_version(installed_torch_root()) or "unknown"
    release = series_base(comments).get("base-version", installed)
    if not installed.startswith(release):
        raise SystemExit(f"this Python's torch is {installed}, the series in {series_dir} is "
                         f"pinned to {release}: run it with a Python whose torch is that")
    return release


def main_series_dir(series_dir: Path) -> Path | None:
    """The main series that a release's series (``patches/<version>/``) was rebased from: the
    parent directory, when the release's directory has no tests of its own and the parent holds
    a series. None for the main series itself."""
    if (series_dir / "tests").is_dir():
        return None
    parent = series_dir.parent
    return parent if (parent / "series").is_file() else None


def tests_dir(series_dir: Path) -> Path:
    """Where the per-patch tests of the series are: its own ``tests/``, else (a release's series)
    the main series' ``tests/``, shared by every release."""
    return (main_series_dir(series_dir) or series_dir) / "tests"


def public_version(version: str) -> str:
    """``2.14.1+cu130`` -> ``2.14.1``: the release, without the wheel's local build tag."""
    return version.split("+", 1)[0]


# ----------------------------------------------------------------------------------------------
# Targets


@dataclasses.dataclass
class Target:
    root: Path  # the directory that contains torch/
    kind: str  # "git" or "tree"


def resolve_target(path: str | Path, mode: str = "auto") -> Target:
    if str(path) == "installed":
        path = installed_torch_root()
    p = Path(path).resolve()
    if (p / "torch").is_dir():
        root = p
    elif p.name == "torch" and (p / "__init__.py").exists():
        root = p.parent
    else:
        raise HalpatchError(
            f"{path}: not a PyTorch checkout, site-packages directory or torch package directory"
        )
    kind = "tree"
    if mode in ("auto", "git") and (root / ".git").exists():
        top = _run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], check=False)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root:
            kind = "git"
    if mode == "git" and kind != "git":
        raise HalpatchError(f"{root} is not the top of a git checkout")
    return Target(root, kind)


def installed_torch_root() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise HalpatchError("torch is not installed for this Python")
    return Path(spec.origin).resolve().parent.parent


def torch_version(root: Path) -> str | None:
    vf = root / "torch" / "version.py"
    if vf.exists():
        m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", vf.read_text(), re.M)
        if m:
            return m.group(1)
    vt = root / "version.txt"
    if vt.exists():
        return vt.read_text().strip()
    return None


# ----------------------------------------------------------------------------------------------
# patch(1) on a staging copy


def _run(cmd, cwd=None, check=True, env=None, input=None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, LC_ALL="C")
    if env:
        full_env.update(env)
    r = subprocess.run(
        cmd, cwd=cwd, env=full_env, input=input, text=True, capture_output=True
    )
    if check and r.returncode != 0:
        raise HalpatchError(
            f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n{r.stdout}{r.stderr}"
        )
    return r


def run_patch(
    staging: Path, patch: Patch, *, reverse=False, dry_run=False, fuzz: int | None = 0
) -> tuple[bool, str]:
    cmd = ["patch", "-p1", "-f", "--no-backup-if-mismatch", "-r", "-", "-i", str(patch.path)]
    if fuzz is not None:
        cmd.append(f"-F{fuzz}")
    if reverse:
        cmd.append("-R")
    if dry_run:
        cmd.append("--dry-run")
    r = _run(cmd, cwd=staging, check=False)
    return r.returncode == 0, r.stdout + r.stderr


class Staging:
    """A temporary copy of the files the series touches, laid out like the target."""

    def __init__(self, root: Path, paths: list[str]):
        self.root = root
        self.paths = paths
        self.dir = Path(tempfile.mkdtemp(prefix="halpatch-"))
        for rel in paths:
            src = root / rel
            if src.is_file():
                dst = self.dir / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def changed(self) -> list[str]:
        out = []
        for rel in self.paths:
            a, b = self.root / rel, self.dir / rel
            if a.is_file() != b.is_file():
                out.append(rel)
            elif b.is_file() and not filecmp.cmp(a, b, shallow=False):
                out.append(rel)
        return out

    def commit(self) -> list[str]:
        """Copies the staged state onto the target; each file is replaced atomically."""
        changed = self.changed()
        for rel in changed:
            dst, src = self.root / rel, self.dir / rel
            if src.is_file():
                dst.parent.mkdir(parents=True, exist_ok=True)
                tmp = dst.parent / f".{dst.name}.halpatch-tmp"
                shutil.copy2(src, tmp)
                if dst.exists():
                    shutil.copymode(dst, tmp)
                os.replace(tmp, dst)
            elif dst.exists():
                dst.unlink()
        return changed


def all_paths(patches: list[Patch]) -> list[str]:
    out: list[str] = []
    for p in patches:
        for rel in p.paths:
            if rel not in out:
                out.append(rel)
    return out


def _hunk_count(patch: Patch) -> int:
    return sum(1 for line in patch.diff.split("\n") if line.startswith("@@ "))


def series_status(root: Path, patches: list[Patch]) -> list[tuple[str, str]]:
    """State of each patch in ``root``: ("applied"|"not applied"|"partial", detail).

    Peels the series from the top: a patch whose reverse applies cleanly is applied (and is
    reversed in the staging copy, so the patches below it see their own context); one whose
    forward applies cleanly is not applied; anything else is partially applied or conflicts.
    """
    states: list[tuple[str, str]] = [("", "")] * len(patches)
    with Staging(root, all_paths(patches)) as st:
        for i in reversed(range(len(patches))):
            p = patches[i]
            ok, _ = run_patch(st.dir, p, reverse=True, dry_run=True)
            if ok:
                states[i] = ("applied", "")
                run_patch(st.dir, p, reverse=True)
                continue
            ok, out = run_patch(st.dir, p, dry_run=True)
            if ok:
                states[i] = ("not applied", "")
                continue
            total = _hunk_count(p)
            ok_r, out_r = run_patch(st.dir, p, reverse=True, dry_run=True)
            failed_r = len(re.findall(r"Hunk #\d+ FAILED", out_r))
            failed_f = len(re.findall(r"Hunk #\d+ FAILED", out))
            applied = total - failed_r
            detail = f"{applied}/{total} hunks applied, {total - failed_f}/{total} apply"
            states[i] = ("partial", detail)
    return states


# ----------------------------------------------------------------------------------------------
# git helpers


def _git(root: Path, *args, check=True, env=None, input=None) -> subprocess.CompletedProcess:
    e = {}
    # git am/revert/commit need an identity; use a neutral one where none is configured.
    if not _git_config(root, "user.name") or not _git_config(root, "user.email"):
        for who in ("AUTHOR", "COMMITTER"):
            for k, v in (("NAME", "halpatch"), ("EMAIL", "halpatch@localhost")):
                e.setdefault(f"GIT_{who}_{k}", os.environ.get(f"GIT_{who}_{k}", v))
    if env:
        e.update(env)
    return _run(["git", "-C", str(root), *args], check=check, env=e, input=input)


def _git_config(root: Path, key: str) -> str:
    r = _run(["git", "-C", str(root), "config", key], check=False)
    return r.stdout.strip()


def _patch_id(text: str, cwd: Path) -> str | None:
    r = _run(["git", "patch-id", "--stable"], cwd=cwd, check=False, input=text)
    return r.stdout.split()[0] if r.stdout.strip() else None


def _commit_patch_ids(root: Path, limit: int) -> list[tuple[str, str]]:
    """(commit, patch-id) of the last ``limit`` commits on HEAD, newest first."""
    log = _git(root, "log", f"-{limit}", "--no-merges", "-p", "--format=commit %H", check=False)
    out = _run(["git", "patch-id", "--stable"], cwd=root, check=False, input=log.stdout)
    pairs = []
    for line in out.stdout.splitlines():
        pid, commit = line.split()
        pairs.append((commit, pid))
    order = _git(root, "log", f"-{limit}", "--no-merges", "--format=%H", check=False).stdout.split()
    ids = dict(pairs)
    return [(c, ids[c]) for c in order if c in ids]


def _require_clean(root: Path):
    r = _git(root, "status", "--porcelain", "--untracked-files=no")
    if r.stdout.strip():
        raise HalpatchError(
            f"{root}: the working tree has uncommitted changes to tracked files; "
            "commit or stash them first (apply keeps the checkout consistent with HEAD)"
        )
    if (Path(_git(root, "rev-parse", "--git-dir").stdout.strip()) / "rebase-apply").exists():
        raise HalpatchError(f"{root}: a git am or rebase is in progress")


# ----------------------------------------------------------------------------------------------
# Commands


def cmd_status(args) -> int:
    _, patches = read_series(args.series_dir)
    target = resolve_target(args.target, args.mode)
    states = series_status(target.root, patches)
    commits = {}
    if target.kind == "git":
        recent = _commit_patch_ids(target.root, 500)
        by_pid = {pid: c for c, pid in recent}
        for p in patches:
            pid = _patch_id(p.path.read_text(), target.root)
            if pid in by_pid:
                commits[p.name] = by_pid[pid][:12]
    version = torch_version(target.root)
    print(f"target: {target.root} ({target.kind}, torch {version or 'unknown version'})")
    width = max(len(p.name) for p in patches)
    for p, (state, detail) in zip(patches, states):
        extra = f"  ({detail})" if detail else ""
        if p.name in commits:
            extra += f"  commit {commits[p.name]}"
        print(f"  {p.name:<{width}}  {state}{extra}")
    n_app = sum(s == "applied" for s, _ in states)
    n_part = sum(s == "partial" for s, _ in states)
    print(f"{n_app} of {len(patches)} applied" + (f", {n_part} partial" if n_part else ""))
    return 1 if n_part else 0


def cmd_apply(args) -> int:
    _, patches = read_series(args.series_dir)
    if args.upto:
        idx = [i for i, p in enumerate(patches) if p.name == args.upto or p.number == args.upto]
        if not idx:
            raise HalpatchError(f"--upto {args.upto}: no such patch in the series")
        patches = patches[: idx[0] + 1]
    target = resolve_target(args.target, args.mode)
    states = series_status(target.root, patches)
    partial = [p.name for p, (s, _) in zip(patches, states) if s == "partial"]
    if partial:
        print("error: partially applied or conflicting patches: " + ", ".join(partial))
        print("       (run 'status' for details; nothing was changed)")
        return 1
    if args.reverse:
        todo = [i for i in reversed(range(len(patches))) if states[i][0] == "applied"]
    else:
        todo = [i for i in range(len(patches)) if states[i][0] == "not applied"]
    verb = "reverse" if args.reverse else "apply"
    if not todo:
        what = "not applied" if args.reverse else "applied"
        print(f"nothing to do: all {len(patches)} patches are already {what}")
        return 0

    # Every change is first made on a staging copy; in git mode this is the --check.
    with Staging(target.root, all_paths(patches)) as st:
        for i in todo:
            ok, out = run_patch(st.dir, patches[i], reverse=args.reverse)
            if not ok:
                print(f"error: {patches[i].name} does not {verb} cleanly; nothing was changed:")
                print("  " + out.strip().replace("\n", "\n  "))
                return 1
        if args.check:
            for i in todo:
                print(f"would {verb} {patches[i].name}")
            skipped = len(patches) - len(todo)
            print(f"check ok: {len(todo)} to {verb}, {skipped} already done")
            return 0
        if target.kind == "tree":
            changed = st.commit()
            done = "reversed" if args.reverse else "applied"
            for i in todo:
                print(f"{done} {patches[i].name}")
            print(f"{len(changed)} files changed in {target.root}")
            return 0

    # git mode
    _require_clean(target.root)
    head = _git(target.root, "rev-parse", "HEAD").stdout.strip()
    if not args.reverse:
        files = [str(patches[i].path) for i in todo]
        r = _git(target.root, "am", "--keep-cr", *files, check=False)
        if r.returncode != 0:
            _git(target.root, "am", "--abort", check=False)
            now = _git(target.root, "rev-parse", "HEAD").stdout.strip()
            if now != head:
                _git(target.root, "reset", "--hard", head)
            print("error: git am failed; the checkout is back at " + head[:12] + ":")
            print("  " + (r.stdout + r.stderr).strip().replace("\n", "\n  "))
            return 1
        for i in todo:
            print(f"applied {patches[i].name}")
        return 0
    # reverse in git: drop the series' commits if they are the topmost ones, else revert them
    recent = _commit_patch_ids(target.root, 500)
    pid_of = {i: _patch_id(patches[i].path.read_text(), target.root) for i in todo}
    commit_of = {}
    for i, pid in pid_of.items():
        for c, cp in recent:
            if cp == pid:
                commit_of[i] = c
                break
    missing = [patches[i].name for i in todo if i not in commit_of]
    if missing:
        print(
            "error: applied, but no commit on HEAD carries " + ", ".join(missing) +
            "; use --mode tree to reverse the files without git"
        )
        return 1
    top = [c for c, _ in recent[: len(todo)]]
    if sorted(top) == sorted(commit_of.values()):
        _git(target.root, "reset", "--keep", f"{top[-1]}^")
        print(f"removed the {len(todo)} series commits from HEAD (now {top[-1][:12]}^)")
    else:
        ordered = [commit_of[i] for i in todo]  # todo is newest patch first
        r = _git(target.root, "revert", "--no-edit", *ordered, check=False)
        if r.returncode != 0:
            _git(target.root, "revert", "--abort", check=False)
            _git(target.root, "reset", "--hard", head)
            print("error: git revert failed; the checkout is back at " + head[:12])
            print("  " + (r.stdout + r.stderr).strip().replace("\n", "\n  "))
            return 1
        print(f"reverted {len(todo)} series commits")
    for i in todo:
        print(f"reversed {patches[i].name}")
    return 0


def _source_files(torch_dir: Path, exts: tuple[str, ...]):
    for dirpath, dirnames, filenames in os.walk(torch_dir):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            if f.endswith(exts):
                yield Path(dirpath) / f


def cmd_workspace(args) -> int:
    comments, patches = read_series(args.series_dir)
    base = series_base(comments)
    src = resolve_target(args.source or installed_torch_root(), "tree").root
    dest = Path(args.dir).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise HalpatchError(f"{dest} exists and is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    exts = tuple(args.ext.split(","))
    n = 0
    for f in _source_files(src / "torch", exts):
        rel = f.relative_to(src)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / rel)
        n += 1
    version = torch_version(src) or "unknown"
    tag = base.get("base-tag", "base")
    if base.get("base-version") and not version.startswith(base["base-version"]):
        # A tree of another release (rebasing the series onto it): tag it as that release.
        tag = f"v{public_version(version)}"
    _run(["git", "init", "-q", "-b", "series", str(dest)])
    _git(dest, "add", "-A")
    _git(
        dest, "commit", "-q", "-m", f"PyTorch {version}: torch sources of {src.name}",
        env={"GIT_AUTHOR_NAME": "base", "GIT_AUTHOR_EMAIL": "base@localhost",
             "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+00:00",
             "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+00:00"},
    )
    _git(dest, "tag", tag)
    print(f"{dest}: {n} files of torch {version}, tagged {tag}")
    if args.no_apply or not patches:
        return 0
    r = _git(dest, "am", "--keep-cr", *[str(p.path) for p in patches], check=False)
    if r.returncode != 0:
        print((r.stdout + r.stderr).strip())
        return 1
    print(f"branch 'series': {len(patches)} patches applied with git am on {tag}")
    return 0


def _normalize_patch(text: str) -> str:
    lines = text.split("\n")
    if lines and re.match(r"^From [0-9a-f]{40} ", lines[0]):
        lines = lines[1:]
    return "\n".join(l for l in lines if not l.startswith("index "))


def _format_patch(repo: Path, base: str, branch: str) -> tuple[Path, list[Path]]:
    out = Path(tempfile.mkdtemp(prefix="halpatch-export-"))
    _git(repo, "format-patch", "--zero-commit", "--no-signature", "-N", "--subject-prefix=PATCH",
         "-o", str(out), f"{base}..{branch}")
    files = sorted(out.glob("*.patch"))
    if not files:
        raise HalpatchError(f"{repo}: no commits in {base}..{branch}")
    return out, files


def _patch_numbers(patches: list[Patch]) -> dict[str, str]:
    return {p.subject: p.number for p in patches}


def _numbered_names(files: list[Path], subjects: list[str], known: dict[str, str],
                    reserved: dict[str, str]) -> list[str]:
    """File names for exported patches. git format-patch numbers commits by position; a patch
    keeps instead the number its subject already has (``known``), so that in every release's
    series a number names the same patch and its test. A new subject (a new or reworded commit)
    takes the number after the patch before it when no other patch holds that number, else the
    next number after all known ones. ``reserved``: numbers of the main series (subject by
    number), which a release's own new patch must not take."""
    assigned: list[str] = []
    taken = {known[s] for s in subjects if s in known}
    top = max([int(n) for n in [*known.values(), *reserved]] or [0])
    prev = 0
    for f, subject in zip(files, subjects):
        if subject in known:
            number = known[subject]
        else:
            number = f"{prev + 1:04d}"
            if number in taken or number in assigned or (
                number in reserved and reserved[number] != subject
            ):
                top += 1
                number = f"{top:04d}"
        top = max(top, int(number))
        prev = int(number)
        assigned.append(number)
    return [f"{n}-{f.name.split('-', 1)[1]}" for n, f in zip(assigned, files)]


def _write_series(series_dir: Path, comments: list[str], names: list[str]):
    text = "\n".join(comments + names) + "\n"
    (series_dir / "series").write_text(text)


def cmd_export(args, refresh=False) -> int:
    series_dir = args.series_dir
    repo = Path(args.repo).resolve()
    main_dir = main_series_dir(series_dir)
    main_comments, main_patches = read_series(main_dir) if main_dir else ([], [])
    if (series_dir / "series").is_file():
        comments, old = read_series(series_dir)
    elif main_dir:
        # A release's first export: the main series' header, pinned to the workspace's release.
        version = public_version(torch_version(repo) or "unknown")
        tag = args.base or f"v{version}"
        pins = {"base-version": version, "base-tag": tag}
        comments = [c for c in main_comments if series_base([c]).keys().isdisjoint(pins)]
        comments += [f"# {k}: {v}" for k, v in pins.items()]
        old = []
    else:
        comments, old = [], []
    base = args.base or series_base(comments).get("base-tag", "base")
    out, files = _format_patch(repo, base, args.branch)
    series_dir.mkdir(parents=True, exist_ok=True)
    try:
        subjects = [parse_patch(f).subject for f in files]
        known = {**_patch_numbers(main_patches), **_patch_numbers(old)}
        reserved = {p.number: p.subject for p in main_patches}
        new_names = _numbered_names(files, subjects, known, reserved)
        report = []
        for f, name in zip(files, new_names):
            dst = series_dir / name
            new_text = f.read_text()
            if dst.exists() and _normalize_patch(dst.read_text()) == _normalize_patch(new_text):
                report.append(f"  unchanged {name}")
                if refresh:
                    continue
            else:
                report.append(("  updated   " if dst.exists() else "  new       ") + name)
            dst.write_text(new_text)
        for p in old:
            if p.name not in new_names:
                p.path.unlink()
                report.append(f"  removed   {p.name}")
        _write_series(series_dir, comments, new_names)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f"{'refreshed' if refresh else 'exported'} {len(files)} patches from {repo} ({base}..{args.branch}):")
    print("\n".join(report))
    return 0


# The authorship line of every patch in the series.
AUTHOR = "torch-hal maintainers"


def lint_series(series_dir: Path, base_root: Path | None) -> list[str]:
    """Returns the list of problems (empty when the series is clean)."""
    problems: list[str] = []
    comments, patches = read_series(series_dir)
    meta = series_base(comments)
    main_dir = main_series_dir(series_dir)
    main_names = {p.number: p.name for p in read_series(main_dir)[1]} if main_dir else {}
    tests = tests_dir(series_dir)
    listed = {p.name for p in patches}
    for f in sorted(series_dir.glob("[0-9][0-9][0-9][0-9]-*.patch")):
        if f.name not in listed:
            problems.append(f"{f.name}: not listed in series")
    previous = 0
    for n, p in enumerate(patches, 1):
        where = p.name
        if main_dir is None and p.number != f"{n:04d}":
            problems.append(f"{where}: number {p.number} out of sequence (expected {n:04d})")
        elif main_dir is not None:
            # A release's series may skip the numbers of patches it does not carry, but a
            # number names the same patch as in the main series (and runs its test).
            if not p.number.isdigit() or int(p.number) <= previous:
                problems.append(
                    f"{where}: number {p.number} out of sequence (after {previous:04d})")
            if main_names.get(p.number, p.name) != p.name:
                problems.append(f"{where}: the main series' {p.number} is {main_names[p.number]}; "
                                "a number names the same patch in every release")
        previous = int(p.number) if p.number.isdigit() else previous
        for key in ("From", "Date", "Subject"):
            if not p.headers.get(key):
                problems.append(f"{where}: missing {key}: header")
        if p.headers.get("From") and not p.headers["From"].startswith(AUTHOR + " <"):
            problems.append(f"{where}: From: must be the project's line, {AUTHOR!r} <address>")
        if not p.headers.get("Subject", "").startswith("[PATCH]"):
            problems.append(f"{where}: Subject must start with '[PATCH]'")
        if len(p.subject) > 75:
            problems.append(f"{where}: subject longer than 75 characters")
        body = p.body.split("\n")
        status = [l for l in body if l.startswith("Upstream-Status:")]
        if len(status) != 1:
            problems.append(f"{where}: needs exactly one Upstream-Status: line")
        elif not UPSTREAM_STATUS_RE.match(status[0]):
            problems.append(
                f"{where}: bad Upstream-Status (Pending | Submitted <url> | Backport <url> | "
                f"Inappropriate <reason>): {status[0]!r}"
            )
        description = [
            l for l in body
            if l.strip() and not re.match(r"^(Upstream-Status|Related|Signed-off-by):", l)
            and not l.startswith(" ")
        ]
        if len(" ".join(description).split()) < 20:
            problems.append(f"{where}: description of the hardcoding and its replacement missing")
        if not p.diff:
            problems.append(f"{where}: no diff")
        for rel in p.paths:
            if not rel.startswith("torch/"):
                problems.append(f"{where}: path not relative to the PyTorch root: {rel}")
        if MACHINE_PATH_RE.search(p.path.read_text()):
            problems.append(f"{where}: contains a machine-specific path")
        # git am must keep the Upstream-Status line in the commit message
        with tempfile.TemporaryDirectory() as td:
            r = _run(["git", "mailinfo", f"{td}/msg", f"{td}/patch"], check=False,
                     input=p.path.read_text())
            info = dict(
                l.split(": ", 1) for l in r.stdout.splitlines() if ": " in l
            )
            msg = Path(td, "msg").read_text() if Path(td, "msg").exists() else ""
            if r.returncode != 0 or not info.get("Author") or not info.get("Subject"):
                problems.append(f"{where}: git mailinfo cannot parse the header")
            elif "Upstream-Status:" not in msg:
                problems.append(f"{where}: Upstream-Status would not survive git am")
        if not sorted(tests.glob(f"test_{p.number}_*.py")):
            problems.append(f"{where}: no test tests/test_{p.number}_*.py in {tests}")
    if base_root is not None:
        version = torch_version(base_root)
        pinned = meta.get("base-version")
        if pinned and (version is None or not version.startswith(pinned)):
            problems.append(f"base {base_root}: torch {version}, the series is pinned to {pinned}")
        with Staging(base_root, all_paths(patches)) as st:
            for p in patches:
                ok, out = run_patch(st.dir, p, fuzz=None)
                if not ok:
                    problems.append(f"{p.name}: does not apply to the base:\n    " +
                                    out.strip().replace("\n", "\n    "))
                    break
                for line in out.splitlines():
                    if OFFSET_RE.search(line) or FUZZ_RE.search(line):
                        problems.append(f"{p.name}: not exact against the base: {line.strip()}")
    return problems


def cmd_lint(args) -> int:
    base_root = None
    if not args.no_base:
        if args.base:
            base_root = resolve_target(args.base, "tree").root
        else:
            base_root = installed_torch_root()
            comments, patches = read_series(args.series_dir)
            pinned = series_base(comments).get("base-version")
            version = torch_version(base_root) or "unknown"
            if pinned and not version.startswith(pinned):
                raise HalpatchError(
                    f"the installed torch is {version}, the series in {args.series_dir} is "
                    f"pinned to {pinned}; pass --base with a pristine {pinned} tree"
                )
            states = series_status(base_root, patches)
            if any(s != "not applied" for s, _ in states):
                raise HalpatchError(
                    f"the installed torch ({base_root}) is patched; pass --base with a pristine "
                    "tree (e.g. a 'halpatch.py workspace --no-apply' directory)"
                )
    problems = lint_series(args.series_dir, base_root)
    _, patches = read_series(args.series_dir)
    for p in problems:
        print("lint: " + p)
    what = f"against {base_root}" if base_root else "(headers only)"
    print(f"lint: {len(patches)} patches {what}: " + ("ok" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="halpatch.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--series-dir", type=Path, default=SERIES_DIR,
                    help="directory holding 'series' and the patches (default: %(default)s)")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("status", help="show which patches are applied to TARGET")
    s.add_argument("target", help="as for apply ('installed': the torch this Python imports)")
    s.add_argument("--mode", choices=("auto", "git", "tree"), default="auto")

    a = sub.add_parser("apply", help="apply (or reverse) the series on TARGET, atomically")
    a.add_argument("target", help="PyTorch git checkout, site-packages dir, torch package dir, "
                   "or 'installed' (the torch this Python imports)")
    a.add_argument("--check", action="store_true", help="only check that the series applies")
    a.add_argument("--reverse", action="store_true", help="remove the series")
    a.add_argument("--mode", choices=("auto", "git", "tree"), default="auto",
                   help="git: git am (checkouts); tree: patch -p1 (default: git for checkouts)")
    a.add_argument("--upto", help="stop after this patch (name or NNNN)")

    w = sub.add_parser("workspace", help="create a git repo of a torch tree's sources + the series")
    w.add_argument("dir")
    w.add_argument("--from", dest="source", help="torch tree (default: the installed torch)")
    w.add_argument("--ext", default=".py,.pyi", help="file extensions to copy (default: %(default)s)")
    w.add_argument("--no-apply", action="store_true", help="only the base commit")

    for name in ("export", "refresh"):
        e = sub.add_parser(name, help=(
            "rewrite the series from a git branch (git format-patch)" if name == "export" else
            "re-export the branch, rewriting only the patches whose content changed"))
        e.add_argument("--repo", required=True, help="git repository holding the patch branch")
        e.add_argument("--base", help="base ref (default: the series' base-tag)")
        e.add_argument("--branch", default="HEAD")

    l = sub.add_parser("lint", help="check headers, tests and zero fuzz/offset on the base")
    l.add_argument("--base", help="pristine torch tree (default: the installed torch, if unpatched)")
    l.add_argument("--no-base", action="store_true", help="skip the apply checks")

    args = ap.parse_args(argv)
    args.series_dir = args.series_dir.resolve()
    try:
        if args.command == "status":
            return cmd_status(args)
        if args.command == "apply":
            return cmd_apply(args)
        if args.command == "workspace":
            return cmd_workspace(args)
        if args.command == "export":
            return cmd_export(args)
        if args.command == "refresh":
            return cmd_export(args, refresh=True)
        if args.command == "lint":
            return cmd_lint(args)
    except HalpatchError as e:
        print(f"halpatch: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
