"""tools/bench_compare.py on a small fixture (tools/tests/data): figures matched by key, ratios,
the noise band (measured from runs, per family, with a default), and flags on what moved."""
import copy
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import bench_compare  # noqa: E402

BENCH = os.path.join(HERE, "data", "hal_bench.json")
STEP = os.path.join(HERE, "data", "step_time.json")


@pytest.fixture
def doc():
    with open(BENCH) as f:
        return json.load(f)


def write(tmp_path, name, d):
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def find(d, **key):
    return next(f for f in d["figures"] if all(f.get(k) == v for k, v in key.items()))


ALLREDUCE_1M = dict(part="coll", measurement="busbw", collective="allreduce", ranks=2, hosts=1,
                    bytes=1 << 20, implementation="hal")


def run(capsys, *argv):
    rc = bench_compare.main(list(argv))
    return rc, capsys.readouterr().out


def test_same_result_moves_nothing(capsys):
    rc, out = run(capsys, BENCH, BENCH)
    assert rc == 0
    assert "138 figures compared: 0 worse, 0 better, 0 changed" in out
    assert "0 only in OLD, 0 only in NEW" in out


def test_figure_beyond_the_band_is_flagged_and_strict_fails(tmp_path, capsys, doc):
    new = copy.deepcopy(doc)
    find(new, **ALLREDUCE_1M)["value"] *= 0.5  # busbw halved: worse
    find(new, part="mem", measurement="allocator pair", bytes=512,
         implementation="hal")["value"] *= 0.5  # ns halved: better
    path = write(tmp_path, "new.json", new)
    rc, out = run(capsys, BENCH, path, "--moved")
    assert rc == 0
    assert "1 worse, 1 better" in out
    worse = [l for l in out.splitlines() if "** WORSE" in l]
    assert len(worse) == 1 and "allreduce x2" in worse[0] and "1 MiB" in worse[0]
    assert " 0.500 " in worse[0]
    assert any("allocator pair" in l and "** BETTER" in l for l in out.splitlines())
    rc, _ = run(capsys, BENCH, path, "--strict")
    assert rc == 1


def test_move_within_the_band_is_not_flagged(tmp_path, capsys, doc):
    new = copy.deepcopy(doc)
    find(new, **ALLREDUCE_1M)["value"] *= 0.9  # within the 25% default band
    rc, out = run(capsys, BENCH, write(tmp_path, "new.json", new), "--strict")
    assert rc == 0 and "0 worse, 0 better" in out


def test_noise_file_sets_the_band_per_family(tmp_path, capsys, doc):
    new = copy.deepcopy(doc)
    find(new, **ALLREDUCE_1M)["value"] *= 0.9
    noise = {"default_band": 0.5, "bands": [
        {"part": "coll", "backend": "cpu", "implementation": "hal", "statistic": "median",
         "ranks": 2, "hosts": 1, "bytes": 1 << 20, "kind": "absolute", "band": 0.05}]}
    rc, out = run(capsys, BENCH, write(tmp_path, "new.json", new), "--noise",
                  write(tmp_path, "noise.json", noise), "--moved")
    assert "1 worse" in out  # 0.9 is outside this family's 5%
    assert "1 families measured, 50% for the others" in out


def test_wrong_results_are_flagged_on_any_change(tmp_path, capsys, doc):
    new = copy.deepcopy(doc)
    find(new, measurement="wrong elements", collective="allgather", ranks=4, bytes=8,
         implementation="hal", hosts=1)["value"] = 1
    rc, out = run(capsys, BENCH, write(tmp_path, "new.json", new), "--moved")
    line = next(l for l in out.splitlines() if "** WORSE" in l)
    assert "wrong elements" in line and "inf" in line


def test_figures_only_on_one_side_are_counted(tmp_path, capsys, doc):
    new = copy.deepcopy(doc)
    new["figures"] = [f for f in new["figures"] if f["part"] != "mem"]
    rc, out = run(capsys, BENCH, write(tmp_path, "new.json", new))
    assert "11 only in OLD, 0 only in NEW" in out


def test_step_time_results_compare_by_device(tmp_path, capsys):
    with open(STEP) as f:
        new = json.load(f)
    new["breakdown"]["neuron"]["copies_s"] *= 2
    rc, out = run(capsys, STEP, write(tmp_path, "step.json", new), "--moved")
    line = next(l for l in out.splitlines() if "** WORSE" in l)
    assert line.startswith("neuron | copies")


def test_results_of_different_kinds_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        bench_compare.main([BENCH, STEP])
    assert e.value.code == 2
    assert "both be hal_bench results or both" in capsys.readouterr().err


def test_measure_noise_takes_the_largest_spread_of_each_family(tmp_path, capsys, doc):
    runs = []
    for i, scale in enumerate((1.0, 1.1, 0.95)):
        d = copy.deepcopy(doc)
        find(d, **ALLREDUCE_1M)["value"] *= scale
        runs.append(write(tmp_path, f"run{i}.json", d))
    rc, out = run(capsys, "--measure-noise", *runs, "--how", "three runs")
    noise = json.loads(out)
    assert noise["how"] == "three runs" and len(noise["runs"]) == 3
    moved = [b for b in noise["bands"] if b["band"] > 0]
    assert len(moved) == 1  # the family of the one figure that moved
    assert moved[0] == {"part": "coll", "backend": "cpu", "implementation": "hal",
                        "statistic": "median", "ranks": 2, "hosts": 1, "bytes": 1 << 20,
                        "kind": "absolute", "band": pytest.approx(1.1 / 0.95 - 1, abs=1e-4)}
    assert noise["default_band"] == 0.0  # every other figure was the same in every run
    for i, j in ((0, 1), (0, 2), (1, 2)):  # the runs that set the bands stay inside them
        noise_file = write(tmp_path, "noise.json", noise)
        rc, out = run(capsys, runs[i], runs[j], "--noise", noise_file, "--strict")
        assert rc == 0 and "0 worse, 0 better" in out
    assert not any(b["statistic"] == "sum" for b in noise["bands"])  # wrong elements: exact
