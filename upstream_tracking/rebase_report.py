#!/usr/bin/env python3
"""How the patch series fares on a newer PyTorch release.

    python3 upstream_tracking/rebase_report.py 2.14.1 [--wheel FILE] [--output FILE]

Gets the release's wheel with ``pip download torch==VERSION --no-deps`` (or uses ``--wheel``),
extracts only ``torch/**/*.py`` into a temporary directory (nothing is installed), and applies
the series there patch by patch, as ``halpatch.py apply`` would:

* already upstream: the patch's reverse applies, i.e. the release already contains the change;
* applies: cleanly, or with offsets (line drift only) or fuzz (context changed; review it);
* conflict: some hunks do not apply; the report names them and shows the release's code at
  the place of the first failing hunk, so the port can start there.

A patch that conflicts is skipped and the next ones are tried on top of the others. The report is
written as Markdown (default: ``upstream_tracking/rebase-VERSION.md``), together with the census
counts of the release before and after the applicable patches: every area (the compile stack and
the test utilities included) and every category, as ``census.py`` counts them.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "patches" / "tools"))
sys.path.insert(0, str(HERE))
import census  # noqa: E402
import halpatch  # noqa: E402


PY_FENCE = "```python"


def get_wheel(version: str, dest: Path) -> Path:
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", f"torch=={version}", "--no-deps",
         "--quiet", "-d", str(dest)],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"pip download torch=={version} failed:\n{r.stdout}{r.stderr}")
    wheels = sorted(dest.glob(f"torch-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"no torch-{version} wheel in {dest}")
    return wheels[0]


def extract_python(wheel: Path, dest: Path) -> int:
    n = 0
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("torch/") and name.endswith(".py"):
                z.extract(name, dest)
                n += 1
    return n


def failing_hunks(output: str) -> list[str]:
    return re.findall(r"Hunk #(\d+) FAILED at (\d+)", output)


def hunk_header(patch: halpatch.Patch, file_index: int, hunk_no: int) -> tuple[str, str]:
    """(file, @@ header) of the n-th hunk (1-based, per file) of the patch."""
    lines = patch.diff.split("\n")
    file_i, hunk_i, current = -1, 0, None
    for line in lines:
        if line.startswith("+++ "):
            file_i += 1
            hunk_i = 0
            current = halpatch._strip_prefix(line[4:])
        elif line.startswith("@@ "):
            hunk_i += 1
            if file_i == file_index and hunk_i == hunk_no:
                return current, line
    return current or "?", "?"


def first_failure(patch: halpatch.Patch, output: str, tree: Path) -> str:
    """Describes the first failing hunk and shows the release's code where it should go."""
    per_file = re.split(r"^(?:patching|checking) file ", output, flags=re.M)[1:]
    for i, chunk in enumerate(per_file):
        fails = failing_hunks(chunk)
        if not fails:
            continue
        fname = chunk.split("\n", 1)[0].strip()
        hunk_no = int(fails[0][0])
        _, header = hunk_header(patch, i, hunk_no)
        func = header.split("@@")[-1].strip()
        hunk = _hunk_lines(patch, i, hunk_no)
        removed = [l[1:] for l in hunk if l.startswith("-") and len(l.strip()) > 12]
        context = [l[1:] for l in hunk if l.startswith(" ") and len(l.strip()) > 12]
        f = tree / fname
        text = f.read_text().split("\n") if f.exists() else []

        def find(candidates):
            for key in candidates:
                for n, line in enumerate(text):
                    if key.strip() in line:
                        return n
            return None

        added = [l[1:].strip() for l in hunk if l.startswith("+") and len(l.strip()) > 8
                 and not l[1:].strip().startswith(("#", '"', "'"))]
        present = [a for a in added if any(a in line for line in text)]
        at = find(removed)
        if added and len(present) * 2 >= len(added) and (at is None or not removed):
            at = find(present) if find(present) is not None else find(context)
            note = (f"{len(present)} of {len(added)} code lines the hunk adds are already in the "
                    "release: the release fixed this part upstream; drop the hunk")
        elif at is not None:
            note = "the lines the patch changes are still there, their context differs: port the hunk"
        elif not removed:
            at = find(context)
            note = "the hunk only adds lines and their context changed: port the hunk"
        else:
            at = find(context)
            note = ("the lines the patch removes are gone: check whether the release fixed the "
                    "same hardcoding (then drop the hunk)")
        excerpt = "\n".join(text[max(0, at - 4): at + 10]) if at is not None else ""
        out = f"{fname}: hunk {hunk_no} (`{func}`) fails; {note}."
        if excerpt:
            out += f"\n\n{PY_FENCE}\n{excerpt}\n```"
        return out
    return output.strip()[:500]


def _hunk_lines(patch: halpatch.Patch, file_index: int, hunk_no: int) -> list[str]:
    lines = patch.diff.split("\n")
    file_i, hunk_i, out, inside = -1, 0, [], False
    for line in lines:
        if line.startswith("+++ "):
            file_i += 1
            hunk_i = 0
            inside = False
            continue
        if line.startswith("@@ "):
            hunk_i += 1
            inside = file_i == file_index and hunk_i == hunk_no
            continue
        if line.startswith("diff --git "):
            inside = False
        if inside:
            out.append(line)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("version", help="PyTorch release, e.g. 2.14.1")
    ap.add_argument("--wheel", type=Path, help="use this wheel instead of pip download")
    ap.add_argument("--output", type=Path, help="Markdown report (default: rebase-VERSION.md)")
    ap.add_argument("--no-census", action="store_true")
    args = ap.parse_args(argv)
    output = args.output or HERE / f"rebase-{args.version}.md"

    comments, patches = halpatch.read_series(REPO / "patches")
    base = halpatch.series_base(comments)
    with tempfile.TemporaryDirectory(prefix="rebase-") as td:
        td = Path(td)
        wheel = args.wheel or get_wheel(args.version, td / "wheel")
        tree = td / "tree"
        n_files = extract_python(wheel, tree)
        version = halpatch.torch_version(tree) or args.version
        states = halpatch.series_status(tree, patches)
        rows, applicable = [], []
        with halpatch.Staging(tree, halpatch.all_paths(patches)) as st:
            for p, (state, detail) in zip(patches, states):
                if state == "applied":
                    rows.append((p, "already upstream", "the release contains the change"))
                    continue
                ok, out = halpatch.run_patch(st.dir, p, dry_run=True, fuzz=None)
                if ok:
                    halpatch.run_patch(st.dir, p, fuzz=None)
                    applicable.append(p)
                    offsets = re.findall(r"offset (-?\d+) lines?", out)
                    fuzz = re.findall(r"with fuzz (\d+)", out)
                    if fuzz:
                        rows.append((p, "applies with fuzz", f"fuzz {max(map(int, fuzz))}: review the context"))
                    elif offsets:
                        rows.append((p, "applies", f"offsets {', '.join(sorted(set(offsets), key=int))} lines"))
                    else:
                        rows.append((p, "applies", "exactly"))
                else:
                    n_fail = len(failing_hunks(out))
                    total = halpatch._hunk_count(p)
                    detail = first_failure(p, out, tree)
                    what = "partly upstream" if "fixed this part upstream" in detail else "conflict"
                    rows.append((p, what, f"{n_fail}/{total} hunks fail; " + detail))
            census_rows = None
            if not args.no_census:
                allow = census.load_allowlist(HERE / "census_allowlist.txt")
                before = census.counts(census.scan(tree, allow))
                st.commit()  # the applicable patches, on the extracted tree
                after = census.counts(census.scan(tree, allow))
                census_rows = (before, after)

    counts = {}
    for _, verdict, _ in rows:
        counts[verdict] = counts.get(verdict, 0) + 1
    lines = [
        f"# Rebase report: the series on PyTorch {version}",
        "",
        f"Generated by `upstream_tracking/rebase_report.py {args.version}` on "
        f"{datetime.date.today().isoformat()}. Series base: PyTorch {base.get('base-version', '?')} "
        f"(`{base.get('base-tag', '?')}`). Tree: the {n_files} `torch/**/*.py` files of the "
        f"`{wheel.name}` wheel (extracted, not installed). Each patch is tried with `patch -p1` "
        "on top of the previous applicable ones.",
        "",
        "Summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + ".",
        "",
        "| patch | result | detail |",
        "|---|---|---|",
    ]
    details = []
    for p, verdict, detail in rows:
        short = detail.split("\n", 1)[0]
        lines.append(f"| {p.number} {p.subject} | {verdict} | {short} |")
        if "\n" in detail:
            details.append(f"### {p.number} {p.subject}\n\n{detail}\n")
    if details:
        lines += ["", "## Conflicts", ""] + details
    if census_rows:
        before, after = census_rows
        focus = census.FOCUS

        def total(c, areas):
            return sum(v for (a, _), v in c.items() if a in areas)

        tb, ta = total(before, census.AREA_NAMES), total(after, census.AREA_NAMES)
        fb, fa = total(before, focus), total(after, focus)
        lines += [
            "",
            "## Census of the release",
            "",
            f"CUDA-hardcoding sites outside allowlisted code (`census.py`, allowlist applied), "
            f"every area: {tb} in {version}, {ta} with the applicable patches; in the eager "
            f"runtime and torch.distributed: {fb}, {fa}.",
            "",
            "| area | release | + series |",
            "|---|---|---|",
        ]
        for area in census.AREA_ORDER:
            lines.append(f"| {area} | {total(before, (area,))} | {total(after, (area,))} |")
        lines += [
            f"| **total** | **{tb}** | **{ta}** |",
            "",
            "| area | category | release | + series |",
            "|---|---|---|---|",
        ]
        for area in census.AREA_ORDER:
            for cat in census.CATEGORIES:
                b, a = before.get((area, cat), 0), after.get((area, cat), 0)
                if a or b:
                    lines.append(f"| {area} | {cat} | {b} | {a} |")
    output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
