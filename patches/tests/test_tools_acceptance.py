"""Tests of the acceptance tools: the step-by-step comparison with the CPU run (harness.py) and
the runner's merge of the ranks and its verdict against expected.json (run_acceptance.py).

No torchrun here: the scripts themselves run in ``make patches-check``."""

import argparse
import json
import sys
from pathlib import Path

import pytest
import torch

ACCEPTANCE = Path(__file__).resolve().parent.parent / "acceptance"
sys.path.insert(0, str(ACCEPTANCE))
import harness  # noqa: E402
import run_acceptance as ra  # noqa: E402


def step(n, loss, **params):
    return {"step": n, "loss": torch.tensor(loss), "params": params}


def features_with(records, reference):
    f = harness.Features("s")
    f.records = {"job": records}
    f.reference = {"job": reference}
    return f


W = torch.tensor([1.0, 2.0, 3.0, 4.0])


def test_equal_records_pass():
    assert features_with([step(1, 0.5, w=W.clone())], [step(1, 0.5, w=W.clone())])._compare("job") is None


def test_one_ulp_in_a_parameter_fails_naming_step_and_tensor():
    off = W.clone()
    off[2] = torch.nextafter(off[2], torch.tensor(10.0))
    f = features_with([step(1, 0.5, w=W.clone()), step(2, 0.4, w=off)],
                      [step(1, 0.5, w=W.clone()), step(2, 0.4, w=W.clone())])
    out = f._compare("job")
    assert out.startswith("FAIL: step 2: w differs from the CPU run (1 of 4 elements")


def test_loss_dtype_and_step_count_are_checked():
    assert "loss differs" in features_with([step(1, 0.5, w=W)], [step(1, 0.25, w=W)])._compare("job")
    out = features_with([step(1, 0.5, w=W.double())], [step(1, 0.5, w=W)])._compare("job")
    assert "torch.float64" in out and "torch.float32" in out
    assert "1 steps recorded, the CPU run recorded 2" in features_with(
        [step(1, 0.5, w=W)], [step(1, 0.5, w=W), step(2, 0.5, w=W)])._compare("job")
    assert "no w" in features_with([step(1, 0.5)], [step(1, 0.5, w=W)])._compare("job")


def test_missing_reference_is_an_error_not_a_pass(tmp_path):
    f = harness.Features("s")
    f._load_reference(argparse.Namespace(compare=str(tmp_path)), 0)
    assert f._compare("job").startswith("error: no CPU reference (s.rank0.pt)")
    f = features_with([], [])
    assert f._compare("job").startswith("error: the CPU reference run recorded no steps")
    f.reference = {}
    assert f._compare("job").startswith("error: the CPU reference run has no records")


def run_script(tmp_path, name, weight, *extra):
    f = harness.Features("s")

    @f.add("job", compare=True)
    def job(ctx):
        f.record("job", 1, torch.tensor(0.5), {"w": weight})

    @f.add("note")
    def note(ctx):
        return "pass: with a note"

    @f.add("broken")
    def broken(ctx):
        raise ValueError("boom\nsecond line")

    args = harness.parse_args("doc", ["--device", "cpu", "--json-dir", str(tmp_path / name), *extra])
    results = f.run(None, args)
    f.write(args, results)
    return results


def test_record_then_compare_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    ref = str(tmp_path / "ref")
    assert run_script(tmp_path, "cpu", W.clone(), "--record", ref)["job"]["status"] == "pass"
    got = run_script(tmp_path, "dev", W.clone(), "--compare", ref)
    assert got["job"]["status"] == "pass: bit for bit the CPU run, 1 step"
    assert got["note"]["status"] == "pass: with a note"
    assert got["broken"]["status"] == "error: ValueError: boom"
    assert "Traceback" in got["broken"]["traceback"]
    off = W.clone()
    off[0] += 1
    assert run_script(tmp_path, "dev2", off, "--compare", ref)["job"]["status"].startswith(
        "FAIL: step 1: w differs")
    data = json.loads((tmp_path / "dev" / "s.rank0.json").read_text())
    assert data["meta"]["rank"] == 0 and data["features"]["note"]["status"] == "pass: with a note"


def write_rank(out, script, rank, features):
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{Path(script).stem}.rank{rank}.json").write_text(json.dumps(
        {"meta": {"rank": rank}, "features": {k: {"status": v} for k, v in features.items()}}))


def test_merge_takes_the_worst_rank(tmp_path):
    write_rank(tmp_path, "a.py", 0, {"x": "pass", "y": "FAIL: r0"})
    write_rank(tmp_path, "a.py", 1, {"x": "error: E: r1", "y": "pass"})
    merged = ra.merge(tmp_path, "a.py", 0, "")
    assert merged["x"]["status"] == "error: E: r1" and merged["x"]["rank"] == 1
    assert merged["y"]["status"] == "FAIL: r0"
    assert "_run" not in merged


def test_merge_a_rank_without_results_fails_every_feature(tmp_path):
    write_rank(tmp_path, "a.py", 0, {"x": "pass"})
    merged = ra.merge(tmp_path, "a.py", 1, "the log")
    assert merged["x"]["status"] == "error: rank 1 wrote no results (torchrun exited 1)"
    assert merged["_run"]["log"] == "the log"
    assert ra.merge(tmp_path / "none", "a.py", 1, "")["_run"]["status"].startswith("error: rank 0, 1")


def verdict(tmp_path, capsys, patched, expected_patched="pass", gaps=None, unpatched="FAIL: x"):
    expected = {"known_gaps": {"dev": gaps or {}},
                "results": {"a.py": {"feat": {"dev": {"unpatched": "FAIL",
                                                      "patched": expected_patched}}}}}
    results = {("a.py", "dev", "unpatched"): {"feat": {"status": unpatched}},
               ("a.py", "dev", "patched"): {"feat": {"status": patched}} if patched else {}}
    args = argparse.Namespace(expected=tmp_path / "expected.json", markdown=False,
                              junit=tmp_path / "junit.xml", update_expected=False,
                              release="2.13.0", suite="patches-acceptance")
    rc = ra.report(args, ["dev"], ["a.py"], results, {}, expected, [], 0.0, 0.0)
    return rc, capsys.readouterr().out, (tmp_path / "junit.xml").read_text()


def test_verdicts(tmp_path, capsys):
    rc, out, xml = verdict(tmp_path, capsys, "pass")
    assert rc == 0 and "FAILED" not in out and "failures=\"0\"" in xml
    # passed patched in expected.json, fails now: a regression, even if listed as a gap
    rc, out, _ = verdict(tmp_path, capsys, "FAIL: broke", gaps={"feat": "why"})
    assert rc == 1 and "REGRESSION dev a.py: feat" in out
    assert "---- dev patched, a.py: feat\nFAIL: broke" in out  # the details of a failure
    # fails patched, expected to fail, but not a known gap: still a failure
    rc, out, _ = verdict(tmp_path, capsys, "FAIL: broke", expected_patched="FAIL")
    assert rc == 1 and "is not a known gap" in out
    # a known gap that fails as expected: reported with its reason, not a failure
    rc, out, xml = verdict(tmp_path, capsys, "FAIL: broke", expected_patched="FAIL",
                           gaps={"feat": "the reason"})
    assert rc == 0 and "[known gap]" in out and "known gap: feat: the reason" in out
    assert "now passes" not in out and "----" not in out
    assert "<skipped" in xml and "known gap (ran, failed as expected)" in xml
    # a known gap that passes now: a note to remove it
    rc, out, _ = verdict(tmp_path, capsys, "pass", expected_patched="FAIL", gaps={"feat": "r"})
    assert rc == 0 and "known gap now passes" in out
    # a feature that did not report at all is not a pass
    rc, out, _ = verdict(tmp_path, capsys, None)
    assert rc == 1 and "missing" in out
    # unpatched results that changed are notes only
    rc, out, _ = verdict(tmp_path, capsys, "pass", unpatched="pass")
    assert rc == 0 and "note: dev unpatched: feat: pass, expected.json says FAIL" in out


def test_update_expected_keeps_the_gaps(tmp_path):
    path = tmp_path / "expected.json"
    expected = {"known_gaps": {"dev": {"feat": "why"}}, "results": {}}
    results = {("a.py", "dev", "unpatched"): {"feat": {"status": "FAIL: x"}},
               ("a.py", "dev", "patched"): {"feat": {"status": "pass: a note"}}}
    ra.write_expected(path, expected, ["a.py"], ["dev"], results)
    data = json.loads(path.read_text())
    assert data["known_gaps"] == {"dev": {"feat": "why"}}
    assert data["results"] == {"a.py": {"feat": {"dev": {"unpatched": "FAIL", "patched": "pass"}}}}


def test_expected_json_covers_the_family():
    data = json.loads(ra.EXPECTED.read_text())
    assert set(data["results"]) == set(ra.SCRIPTS)
    for script, feats in data["results"].items():
        for name, per_device in feats.items():
            for device, cells in per_device.items():
                # every feature passes patched, or is a known gap with its reason
                assert cells["patched"] == "pass" or data["known_gaps"][device].get(name), \
                    (script, name, device)


@pytest.mark.parametrize("script", ra.SCRIPTS)
def test_scripts_name_no_device(script):
    """The device string is the only switch: below their docstring the scripts name no device
    (--device defaults to "cuda", as written for CUDA) and no torch_hal API."""
    body = (ACCEPTANCE / script).read_text().split('"""', 2)[2]
    code = "\n".join(line.split("#")[0] for line in body.splitlines())
    for literal in ("torch.cuda", '"hal"', '"neuron"', "'hal'", "'neuron'", "torch_hal",
                    "torch.hal", "torch.neuron"):
        assert literal not in code, (script, literal)
