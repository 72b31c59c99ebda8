"""examples/compare_compiled.py on synthetic loss logs: the target's verdict and exit status."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "compare_compiled.py")

pytestmark = pytest.mark.own_backend  # uses no device: once, in the cpu run


def write(tmp_path, name, losses, device_type="cpu", share=None):
    path = tmp_path / f"{name}.json"
    log = {"device_type": device_type,
           "steps": [{"step": i + 1, "loss": v} for i, v in enumerate(losses)]}
    if share:
        log["device_programs"] = share
    path.write_text(json.dumps(log))
    return str(path)


def run(*paths):
    return subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True, text=True)


def test_within_twice_inductors_deviation_is_met(tmp_path):
    eager = write(tmp_path, "eager", [4.0, 3.0, 2.0])
    inductor = write(tmp_path, "inductor", [4.0, 3.03, 2.0])  # 1e-2 from eager
    device = write(tmp_path, "device", [4.0, 3.0, 2.03], "neuron",
                   {"lowered": 9, "total": 10, "graphs": ["forward: ..."]})
    r = run(eager, inductor, device)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "9/10 (90.0%)" in r.stdout and ": met" in r.stdout


def test_dropout_masks_drawn_and_replayed_are_told_apart(tmp_path):
    eager = write(tmp_path, "eager", [4.0, 3.0])
    inductor = write(tmp_path, "inductor", [4.0, 3.0])
    for draws, replays, want in ((13, 6, "7 drawn, 6 replayed (the forward's draws"),
                                 (2, 0, "outside the programs: 2 drawn\n"),
                                 (3, 3, "outside the programs: 3 replayed")):
        device = write(tmp_path, "device", [4.0, 3.0], "neuron",
                       {"lowered": 5, "total": 5, "draws": draws, "replays": replays,
                        "graphs": []})
        r = run(eager, inductor, device)
        assert r.returncode == 0 and want in r.stdout, r.stdout + r.stderr


def test_beyond_it_is_missed(tmp_path):
    eager = write(tmp_path, "eager", [4.0, 3.0, 2.0])
    inductor = write(tmp_path, "inductor", [4.0, 3.0, 2.0002])  # 1e-4
    device = write(tmp_path, "device", [4.0, 3.0, 2.1], "neuron")
    r = run(eager, inductor, device)
    assert r.returncode == 1 and "MISSED" in r.stdout
    assert "none reported" in r.stdout


def test_unusable_logs(tmp_path):
    eager = write(tmp_path, "eager", [4.0, 3.0])
    inductor = write(tmp_path, "inductor", [4.0, 3.0, 2.0])
    assert run(eager, inductor, inductor).returncode == 2
    assert run(eager, inductor, str(tmp_path / "missing.json")).returncode == 2
