"""examples/compare_losses.py on synthetic loss logs: the comparison's verdict and exit status, and
the plot it writes with matplotlib (a valid PNG of plausible size; pixels are not compared)."""

import importlib.util
import json
import math
import os
import struct

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "compare_losses.py")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def compare_losses():
    if not os.path.exists(SCRIPT):
        pytest.skip("examples/ is not next to bridge/")
    spec = importlib.util.spec_from_file_location("compare_losses", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_log(device_type, steps=40, bump=None):
    """A train_tiny_lm.py --loss-log: a decaying loss; bump = {step: added loss}."""
    bump = bump or {}
    return {
        "device_type": device_type,
        "steps": [{"step": k, "loss": 4.0 * math.exp(-k / 12) + 1.2 + bump.get(k, 0.0),
                   "time_s": 0.01} for k in range(1, steps + 1)],
    }


def write_logs(tmp_path, cpu, dev):
    paths = []
    for name, log in (("cpu.json", cpu), ("dev.json", dev)):
        path = tmp_path / name
        path.write_text(json.dumps(log))
        paths.append(str(path))
    return paths


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    # IHDR comes first: length 13, then width and height.
    length, kind, width, height = struct.unpack(">I4sII", data[8:24])
    assert (length, kind) == (13, b"IHDR")
    assert width >= 400 and height >= 300
    assert len(data) > 20_000, "a figure with two panels, labels and a legend"
    assert data.endswith(b"IEND\xaeB`\x82")


def test_plot_of_identical_runs_is_a_png(compare_losses, tmp_path):
    cpu_path, dev_path = write_logs(tmp_path, synthetic_log("cpu"), synthetic_log("neuron"))
    cpu_log, cpu_steps = compare_losses.load(cpu_path)
    dev_log, dev_steps = compare_losses.load(dev_path)
    out = tmp_path / "curves.png"
    compare_losses.plot(str(out), cpu_log, cpu_steps, dev_log, dev_steps)
    assert_png(out)


def test_largest_deviation_is_the_first_step_with_the_largest_relative_difference(
        compare_losses, tmp_path):
    cpu_path, dev_path = write_logs(tmp_path, synthetic_log("cpu"),
                                    synthetic_log("neuron", bump={5: 1e-5, 30: 1e-5}))
    _, cpu_steps = compare_losses.load(cpu_path)
    _, dev_steps = compare_losses.load(dev_path)
    max_abs, max_rel, worst = compare_losses.largest_deviation(cpu_steps, dev_steps)
    assert worst == 30  # the same bump is relatively larger where the loss is smaller
    assert max_abs == pytest.approx(1e-5, rel=1e-6)
    assert max_rel == pytest.approx(1e-5 / cpu_steps[30]["loss"], rel=1e-6)


def test_main_writes_the_plot_and_fails_a_deviation_beyond_rtol(compare_losses, tmp_path, capsys):
    cpu_path, dev_path = write_logs(tmp_path, synthetic_log("cpu"),
                                    synthetic_log("neuron", steps=35, bump={17: 3e-4}))
    out = tmp_path / "loss_curves.png"
    assert compare_losses.main([cpu_path, dev_path, "--rtol", "1e-6", "--plot", str(out)]) == 1
    text = capsys.readouterr().out
    assert "EXCEEDS rtol 1e-06" in text and "(step 17)" in text
    assert_png(out)
    assert compare_losses.main([cpu_path, dev_path, "--rtol", "1e-3", "--plot", str(out)]) == 0


def test_main_reports_a_plot_it_cannot_write(compare_losses, tmp_path, capsys):
    cpu_path, dev_path = write_logs(tmp_path, synthetic_log("cpu"), synthetic_log("neuron"))
    missing = tmp_path / "no-such-dir" / "curves.png"
    assert compare_losses.main([cpu_path, dev_path, "--plot", str(missing)]) == 2
    assert "cannot write the plot" in capsys.readouterr().err
