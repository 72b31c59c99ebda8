"""What the acceptance scripts share that is not the user's code: arguments, the device pick,
per-feature results, and the per-step records compared with a CPU run.

A script registers its features with ``@features.add(name)``; each returns None (pass), a
string (``FAIL: ...``, or ``error: ...`` when it could not get to the check) or raises
(``error: <exception>``), so one broken feature does not hide the others. With ``--json-dir``
each rank writes ``<script>.rank<N>.json``.

Step-by-step comparison with the CPU: a feature calls ``features.record(name, step, loss,
params)`` after every optimizer step. A run with ``--record DIR`` (the CPU + gloo run of the
same script) runs only those features (and the ones they need, ``reference=True``) and saves
the records to ``DIR/<script>.rank<N>.pt``; a run with ``--compare DIR``
checks its own records against them after the feature: the loss of every step and every
parameter after it must be bit for bit the CPU's, else the feature fails naming the first
step, tensor and largest difference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

import torch
import torch.distributed as dist


def parse_args(doc: str, argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="the only switch: cuda, hal, neuron, cpu, ...")
    ap.add_argument("--json-dir", help="write <script>.rank<N>.json with the results here")
    ap.add_argument("--work-dir", help="checkpoint directory (default: a temp dir)")
    ap.add_argument("--record", help="save the per-step records here (the CPU reference run)")
    ap.add_argument("--compare", help="compare the per-step records with those saved here")
    return ap.parse_args(argv)


def local_device(args) -> torch.device:
    """The rank's device, picked as CUDA scripts pick it::

        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local_rank)
        torch.accelerator.set_device_index(local_rank)   # torch.cuda.set_device(local_rank)

    ``--device cpu`` (the reference run) has no device index to set."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cpu":
        return torch.device("cpu")
    try:
        device = torch.device(args.device, local_rank)
        torch.accelerator.set_device_index(local_rank)
    except Exception as e:
        raise RuntimeError(f"{e}{_backend_note()}") from e
    return device


def _backend_note() -> str:
    """Why the device is missing, when a device plugin says (torch_hal: a backend that could not
    be opened). The scripts themselves never name the plugin."""
    plugin = sys.modules.get("torch_hal")
    if plugin is not None and hasattr(plugin, "is_loaded") and not plugin.is_loaded():
        return f" (torch_hal did not load: {plugin.load_error()})"
    return ""


def work_dir(args) -> Path:
    if args.work_dir:
        path = Path(args.work_dir)
    elif "TORCHELASTIC_RUN_ID" in os.environ:  # one directory shared by the ranks of this run
        path = Path(tempfile.gettempdir()) / f"acceptance-{os.environ['TORCHELASTIC_RUN_ID']}"
    else:
        path = Path(tempfile.mkdtemp(prefix="acceptance-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def short_error(e: BaseException) -> str:
    text = str(e).strip()
    return f"error: {type(e).__name__}: {text.splitlines()[0] if text else ''}"


class Features:
    def __init__(self, script: str):
        self.script = script
        self.items = []  # (name, fn)
        self.records: dict[str, list[dict]] = {}
        self.reference: dict[str, list[dict]] | None = None
        self.reference_error: str | None = None
        self.compared: set[str] = set()
        self.for_reference: set[str] = set()

    def add(self, name: str, compare: bool = False, reference: bool = False):
        """compare: the feature records its steps, checked against the CPU run's; reference:
        the CPU run (``--record``) needs it too (it runs only these and the compared ones)."""
        def deco(fn):
            self.items.append((name, fn))
            if compare:
                self.compared.add(name)
            if compare or reference:
                self.for_reference.add(name)
            return fn

        return deco

    # ---- per-step records ----------------------------------------------------------------

    def record(self, name: str, step: int, loss: torch.Tensor, params: dict[str, torch.Tensor]):
        """The loss of a step and the (full, unsharded) parameters after it, on the CPU."""
        self.records.setdefault(name, []).append({
            "step": step,
            "loss": loss.detach().float().cpu().clone(),
            "params": {k: v.detach().cpu().clone() for k, v in params.items()},
        })

    def _load_reference(self, args, rank):
        if not args.compare:
            return
        path = Path(args.compare) / f"{self.script}.rank{rank}.pt"
        try:
            self.reference = torch.load(path, weights_only=True)
        except Exception as e:  # the features that compare report it
            self.reference_error = f"no CPU reference ({path.name}): {short_error(e)}"

    def _compare(self, name: str) -> str | None:
        if self.reference_error:
            return f"error: {self.reference_error}"
        ref = self.reference.get(name)
        if ref is None:
            return "error: the CPU reference run has no records of this feature"
        got = self.records.get(name, [])
        if not ref:
            return "error: the CPU reference run recorded no steps of this feature"
        if len(got) != len(ref):
            return f"FAIL: {len(got)} steps recorded, the CPU run recorded {len(ref)}"
        for g, r in zip(got, ref):
            pairs = [("loss", g["loss"], r["loss"])]
            pairs += [(k, g["params"].get(k), v) for k, v in r["params"].items()]
            for what, a, b in pairs:
                if a is None:
                    return f"FAIL: step {g['step']}: no {what}"
                if a.dtype != b.dtype or a.shape != b.shape:
                    return (f"FAIL: step {g['step']}: {what} is {a.dtype}{list(a.shape)}, "
                            f"{b.dtype}{list(b.shape)} on the CPU")
                if not torch.equal(a, b):
                    diff = (a.double() - b.double()).abs().max().item()
                    n = int((a != b).sum())
                    return (f"FAIL: step {g['step']}: {what} differs from the CPU run "
                            f"({n} of {a.numel()} elements, max |diff| {diff:.3g})")
        return None

    # ---- running ---------------------------------------------------------------------------

    def run(self, ctx, args) -> dict:
        rank = int(os.environ.get("RANK", "0"))
        self._load_reference(args, rank)
        results = {}
        for name, fn in self.items:
            entry = {}
            if args.record and name not in self.for_reference:
                results[name] = {"status": "not run: the reference run records the compared "
                                           "features only"}
                continue
            try:
                out = fn(ctx)
                if out is None and args.compare and name in self.compared:
                    n = len(self.records[name])
                    out = self._compare(name) or (
                        f"pass: bit for bit the CPU run, {n} step{'s' if n != 1 else ''}")
                if out is None:
                    entry["status"] = "pass"
                elif out.startswith(("error:", "FAIL:", "pass: ")):
                    entry["status"] = out
                else:
                    entry["status"] = f"FAIL: {out}"
            except Exception as e:  # one feature must not stop the others
                entry["status"] = short_error(e)
                entry["traceback"] = traceback.format_exc(limit=8)
            results[name] = entry
            if dist.is_initialized():
                with contextlib.suppress(Exception):
                    dist.barrier()
        if args.record:
            out = Path(args.record)
            out.mkdir(parents=True, exist_ok=True)
            torch.save(self.records, out / f"{self.script}.rank{rank}.pt")
        return results

    def write(self, args, results: dict, extra_meta: dict | None = None):
        rank = int(os.environ.get("RANK", "0"))
        if args.json_dir:
            out = Path(args.json_dir)
            out.mkdir(parents=True, exist_ok=True)
            meta = {"script": self.script, "torch": torch.__version__, "torch_file": torch.__file__,
                    "device": args.device, "rank": rank,
                    "world_size": int(os.environ.get("WORLD_SIZE", "1"))}
            meta.update(extra_meta or {})
            (out / f"{self.script}.rank{rank}.json").write_text(
                json.dumps({"meta": meta, "features": results}, indent=1))
        if rank == 0:
            width = max(len(n) for n in results)
            for name, entry in results.items():
                print(f"{name:<{width}}  {entry['status']}", flush=True)
