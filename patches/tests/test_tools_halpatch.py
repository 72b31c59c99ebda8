"""Tests of patches/tools/halpatch.py: atomic, idempotent apply on trees and git checkouts.

They work on small trees made of the files the series touches, copied from the installed
torch 2.13.0 (the series' base), so they neither need nor touch the system's torch.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PATCHES = Path(__file__).resolve().parent.parent
TOOLS = PATCHES / "tools"
sys.path.insert(0, str(TOOLS))
import halpatch  # noqa: E402

HALPATCH = [sys.executable, str(TOOLS / "halpatch.py")]


def run(*args, cwd=None, check=None):
    r = subprocess.run([*HALPATCH, *map(str, args)], cwd=cwd, text=True, capture_output=True)
    if check is not None:
        assert r.returncode == check, r.stdout + r.stderr
    return r


@pytest.fixture(scope="module")
def series():
    _, patches = halpatch.read_series(PATCHES)
    return patches


@pytest.fixture(scope="module")
def base_root(series):
    root = halpatch.installed_torch_root()
    states = halpatch.series_status(root, series)
    if any(s != "not applied" for s, _ in states):
        pytest.skip("the installed torch is not a pristine base for the series")
    return root


@pytest.fixture
def tree(tmp_path, series, base_root):
    """A site-packages-like tree holding the base version of every file the series touches."""
    root = tmp_path / "site"
    for rel in halpatch.all_paths(series) + ["torch/version.py", "torch/__init__.py"]:
        src = base_root / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


def break_patch(root: Path, patch) -> None:
    """Edits the first context line of the patch's first hunk so that the hunk cannot apply."""
    lines = patch.diff.split("\n")
    target = patch.files[0][0]
    h = next(i for i, l in enumerate(lines) if l.startswith("@@ "))
    context = next(l[1:] for l in lines[h + 1:] if l.startswith(" ") and l.strip())
    f = root / target
    text = f.read_text()
    assert context in text
    f.write_text(text.replace(context, context + "  # local edit", 1))


def test_tree_apply_status_reverse_roundtrip(tree, series):
    before = snapshot(tree)
    run("status", tree, check=0)
    r = run("apply", "--check", tree, check=0)
    assert f"check ok: {len(series)} to apply" in r.stdout
    assert snapshot(tree) == before  # --check writes nothing
    run("apply", tree, check=0)
    r = run("status", tree, check=0)
    assert f"{len(series)} of {len(series)} applied" in r.stdout
    after = snapshot(tree)
    assert after != before
    # idempotent: applying again is a no-op
    r = run("apply", tree, check=0)
    assert "nothing to do" in r.stdout
    assert snapshot(tree) == after
    # reverse restores the base byte for byte
    run("apply", "--reverse", tree, check=0)
    assert snapshot(tree) == before
    r = run("apply", "--reverse", tree, check=0)
    assert "nothing to do" in r.stdout


def test_tree_apply_is_atomic_when_the_fifth_patch_fails(tree, series):
    fifth = series[4]
    break_patch(tree, fifth)
    before = snapshot(tree)
    r = run("apply", tree, check=1)
    assert fifth.name in r.stdout and "nothing was changed" in r.stdout
    # patches 1-4 applied in staging, but the target is untouched
    assert snapshot(tree) == before
    r = run("status", tree)
    assert "0 of" in r.stdout


def test_partial_patch_is_reported_and_refused(tree, series):
    # apply only the first hunk of a multi-hunk patch by hand
    multi = next(p for p in series if halpatch._hunk_count(p) > 1)
    lines = multi.diff.split("\n")
    hunks = [i for i, l in enumerate(lines) if l.startswith("@@ ")]
    head = next(i for i, l in enumerate(lines) if l.startswith("--- "))
    partial = "\n".join(lines[head:hunks[1]]) + "\n"
    p = subprocess.run(["patch", "-p1", "-d", str(tree)], input=partial, text=True,
                       capture_output=True)
    assert p.returncode == 0, p.stdout + p.stderr
    r = run("status", tree, check=1)
    assert "partial" in r.stdout
    before = snapshot(tree)
    r = run("apply", tree, check=1)
    assert multi.name in r.stdout and "nothing was changed" in r.stdout
    assert snapshot(tree) == before


def test_resume_after_some_patches(tree, series):
    run("apply", "--upto", "0003", tree, check=0)
    r = run("status", tree, check=0)
    assert "3 of" in r.stdout
    r = run("apply", tree, check=0)
    assert "applied 0003" not in r.stdout and "applied 0004" in r.stdout
    assert f"{len(series)} of {len(series)} applied" in run("status", tree).stdout


def git(root, *args):
    r = subprocess.run(["git", "-C", str(root), *args], text=True, capture_output=True,
                       env={**__import__("os").environ, "GIT_AUTHOR_NAME": "t",
                            "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
                            "GIT_COMMITTER_EMAIL": "t@localhost"})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


@pytest.fixture
def checkout(tree):
    git(tree, "init", "-q")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "base")
    return tree


def test_git_apply_keeps_authorship_and_messages(checkout, series):
    base = git(checkout, "rev-parse", "HEAD")
    run("apply", checkout, check=0)
    log = git(checkout, "log", "--format=%an|%s", f"{base}..HEAD").splitlines()
    assert len(log) == len(series)
    subjects = [l.split("|", 1)[1] for l in reversed(log)]
    assert subjects == [p.subject for p in series]
    assert "Upstream-Status:" in git(checkout, "log", "-1", "--format=%B")
    authors = {l.split("|", 1)[0] for l in log}
    assert authors == {halpatch.parse_patch(series[0].path).headers["From"].split(" <")[0]}
    assert "nothing to do" in run("apply", checkout, check=0).stdout
    # reverse drops the series' commits again
    run("apply", "--reverse", checkout, check=0)
    assert git(checkout, "rev-parse", "HEAD") == base


def test_git_apply_is_atomic_when_the_fifth_patch_fails(checkout, series):
    break_patch(checkout, series[4])
    git(checkout, "commit", "-q", "-am", "local edit")
    head = git(checkout, "rev-parse", "HEAD")
    r = run("apply", checkout, check=1)
    assert series[4].name in r.stdout
    assert git(checkout, "rev-parse", "HEAD") == head
    assert git(checkout, "status", "--porcelain", "--untracked-files=no") == ""
    assert not (checkout / ".git" / "rebase-apply").exists()


def test_git_apply_refuses_a_dirty_checkout(checkout, series):
    f = checkout / series[0].files[0][0]
    f.write_text(f.read_text() + "\n# uncommitted\n")
    r = run("apply", checkout, check=2)
    assert "uncommitted changes" in r.stderr


def test_workspace_export_roundtrip(tmp_path, tree, series):
    ws = tmp_path / "ws"
    run("workspace", ws, "--from", tree, check=0)
    out = tmp_path / "series-copy"
    out.mkdir()
    shutil.copy2(PATCHES / "series", out / "series")
    for p in series:
        shutil.copy2(p.path, out / p.name)
    (out / "tests").symlink_to(PATCHES / "tests")
    r = run("--series-dir", out, "export", "--repo", ws, check=0)
    assert r.stdout.count("unchanged") == len(series)
    for p in series:
        assert (out / p.name).read_bytes() == p.path.read_bytes()
    # a changed commit is picked up by refresh
    f = ws / series[-1].files[0][1]
    f.write_text(f.read_text() + "\n")
    git(ws, "commit", "-q", "-a", "--amend", "--no-edit")
    r = run("--series-dir", out, "refresh", "--repo", ws, check=0)
    assert f"updated   {series[-1].name}" in r.stdout
    assert r.stdout.count("unchanged") == len(series) - 1


def test_lint_passes_on_the_series(tree):
    r = run("lint", "--base", tree, check=0)
    assert r.stdout.strip().endswith("ok")


def test_lint_detects_offsets_and_missing_headers(tmp_path, tree, series):
    # an offset: one extra line at the top of the first patched file
    f = tree / series[0].files[0][0]
    f.write_text("# extra line\n" + f.read_text())
    r = run("lint", "--base", tree, check=1)
    assert "offset" in r.stdout and series[0].name in r.stdout
    # a patch without Upstream-Status, and a patch without its test
    out = tmp_path / "series-copy"
    out.mkdir()
    shutil.copy2(PATCHES / "series", out / "series")
    for p in series:
        text = p.path.read_text()
        if p is series[1]:
            text = text.replace("Upstream-Status: Pending\n", "")
        if p is series[3]:
            text = text.replace("From: torch-hal maintainers <", "From: Someone Else <", 1)
        (out / p.name).write_text(text)
    (out / "tests").mkdir()
    for t in (PATCHES / "tests").glob("test_0*.py"):
        if not t.name.startswith(f"test_{series[2].number}_"):
            shutil.copy2(t, out / "tests" / t.name)
    r = run("--series-dir", out, "lint", "--no-base", check=1)
    assert f"{series[1].name}: needs exactly one Upstream-Status" in r.stdout
    assert f"{series[2].name}: no test" in r.stdout
    assert f"{series[3].name}: From: must be the project's line" in r.stdout


def test_release_series_shares_the_main_series_tests_and_numbers(tmp_path, tree, series):
    """A release's series (patches/<version>/, without tests/ of its own) uses its parent's tests,
    may skip a number whose patch it does not carry, and export keeps the main series' numbers."""
    main = tmp_path / "patches"
    main.mkdir()
    shutil.copy2(PATCHES / "series", main / "series")
    for p in series:
        shutil.copy2(p.path, main / p.name)
    (main / "tests").symlink_to(PATCHES / "tests")
    release = main / "9.9"
    assert halpatch.tests_dir(release) == main / "tests"
    assert halpatch.tests_dir(main) == main / "tests"

    # the release's branch: the series without its third patch (as if fixed upstream there)
    ws = tmp_path / "ws"
    run("--series-dir", main, "workspace", ws, "--from", tree, check=0)
    third = git(ws, "rev-list", "--reverse", "v2.13.0..HEAD").split()[2]
    git(ws, "rebase", "-q", "--onto", f"{third}^", third)
    r = run("--series-dir", release, "export", "--repo", ws, check=0)
    names = [p.name for p in series if p is not series[2]]
    assert sorted(f.name for f in release.glob("*.patch")) == names
    assert "# base-version: 2.13.0" in (release / "series").read_text()
    # a gap in the numbers is fine for a release; the tests come from the parent
    r = run("--series-dir", release, "lint", "--base", tree, check=0)
    assert r.stdout.strip().endswith("ok"), r.stdout
    (release / "tests").mkdir()  # tests of its own: it is a main series, numbered 1..N
    r = run("--series-dir", release, "lint", "--no-base", check=1)
    assert f"{series[3].number} out of sequence" in r.stdout
    (release / "tests").rmdir()
    # a patch whose number names another patch in the main series
    renamed = release / names[-1].replace(series[-1].number, series[0].number, 1)
    (release / names[-1]).rename(renamed)
    text = (release / "series").read_text().replace(names[-1], renamed.name)
    (release / "series").write_text(text)
    r = run("--series-dir", release, "lint", "--no-base", check=1)
    assert "a number names the same patch in every release" in r.stdout

    # a reworded commit keeps its number in the main series (the old file goes)
    git(ws, "commit", "-q", "--amend", "-m", "a reworded subject\n\nUpstream-Status: Pending\n")
    r = run("--series-dir", main, "export", "--repo", ws, check=0)
    new = sorted(main.glob(f"{series[-1].number}-*.patch"))
    assert [f.name for f in new] == [f"{series[-1].number}-a-reworded-subject.patch"], r.stdout
    assert f"removed   {series[-1].name}" in r.stdout
