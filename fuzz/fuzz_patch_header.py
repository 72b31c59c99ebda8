#!/usr/bin/env python3
"""atheris (libFuzzer for Python) target: the patch header parser of the PyTorch patch series
(patches/tools/halpatch.py, parse_patch), which reads the mail-style header, the description and
the file list of a git format-patch file. Input: the file's bytes, decoded as a text file would
be (invalid UTF-8 replaced). Checks, besides the absence of any exception: the header keys it
returns were header lines, and every path it lists appears in the text.

If the parser cannot be imported (the tool moved or is being rewritten), the target says so and
exits 0: "skipped: <reason>", which run.sh reports as a skip rather than a pass.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(os.path.dirname(HERE), "patches", "tools")

try:
    import atheris
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"fuzz_patch_header: skipped: atheris is not installed ({e}); pip install atheris")
    sys.exit(0)

sys.path.insert(0, TOOLS)
try:
    with atheris.instrument_imports():
        import halpatch
    parse_patch = halpatch.parse_patch
except Exception as e:  # ImportError, AttributeError, or the tool failing at import
    print(f"fuzz_patch_header: skipped: cannot import parse_patch from patches/tools/halpatch.py ({e})")
    sys.exit(0)


class TextFile:
    """What parse_patch needs of a pathlib.Path: a name and read_text()."""

    def __init__(self, text: str):
        self.name = "0001-fuzz.patch"
        self._text = text

    def read_text(self, *args, **kwargs) -> str:
        return self._text


def TestOneInput(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    patch = parse_patch(TextFile(text))
    # Touch everything a caller reads.
    _ = (patch.number, patch.subject, patch.body, patch.diff, patch.paths)
    for key in patch.headers:
        if ":" in key or "\n" in key:
            raise AssertionError(f"header key {key!r} spans a separator")
    for old, new in patch.files:
        for p in (old, new):
            if p is not None and p not in text:
                raise AssertionError(f"path {p!r} is not in the input")


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
