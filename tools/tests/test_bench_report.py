"""tools/bench_report.py on a small fixture (tools/tests/data): every plot drawn from a complete
result, and a reason in the place of each plot whose figures a partial result lacks."""
import base64
import json
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import bench_report  # noqa: E402

BENCH = os.path.join(HERE, "data", "hal_bench.json")
STEP = os.path.join(HERE, "data", "step_time.json")
# Every plot of a complete result, as titled on the page.
TITLES = ("Bus bandwidth against message size, 2 processes",
          "Bus bandwidth against message size, 4 processes",
          "Time per operation against message size, 2 processes",
          "Time per operation against message size, 4 processes",
          "Scaling: 2 against 4 processes, one host against two simulated hosts (busbw)",
          "Copy bandwidth: hal_memcpy_async against memcpy (raw CUDA on the cuda backend)",
          "Caching allocator: alloc + free pair against malloc + free",
          "Training step per device: compute, fallback, copies",
          "Per-operator cost: a trivial operator on hal against plain CPU")


def sections(page):
    """Title -> the HTML of that plot's section."""
    parts = re.split(r"<h3>(.*?)</h3>", page)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.fixture
def fast_png(monkeypatch):
    """Every plot is built, axes and all, but not rasterised (the slow part): the test of a
    complete result checks the real PNGs."""
    def png_of(fig):
        bench_report.plt.close(fig)
        return "UE5H"
    monkeypatch.setattr(bench_report, "png_of", png_of)


@pytest.fixture
def bench_doc():
    with open(BENCH) as f:
        return json.load(f)


def test_complete_result_draws_every_plot(monkeypatch):
    monkeypatch.setattr(bench_report, "DPI", 20)  # real PNGs, small: the test's time is drawing
    page, table = bench_report.build(BENCH, STEP)
    found = sections(page)
    for title in TITLES:
        assert title in found, title
        png = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', found[title])
        assert png and base64.b64decode(png.group(1)).startswith(b"\x89PNG"), title
    assert "Not drawn" not in page
    assert "<script" not in page and "http" not in page.split("<style>")[0]  # stands alone
    assert "2026-01-02T03:04:05Z" in page and "0123abc" in page
    assert "3 of 6 targets met</b>" in page  # hal_bench: 2 of 4 counted; the step: 1 of 2


def test_markdown_table_lists_every_target_with_its_verdict(fast_png):
    _, table = bench_report.build(BENCH, STEP)
    lines = table.splitlines()
    assert lines[0] == "| part | target | measured | threshold | verdict |"
    assert len(lines) == 2 + 7
    assert "| mem | cpu: dispatch overhead <= 2 ns | 0.8 ns | <= 2 ns | met |" in lines
    assert any("faster than malloc+free" in l and "**MISSED**" in l for l in lines)
    assert any("latency" in l and "**MISSED (no result)**" in l for l in lines)
    assert any("trainium: dispatch" in l and l.endswith("| n/a |") for l in lines)
    assert any(l.startswith("| step |") and "1.3x" in l for l in lines)
    assert any("per-operator cost" in l and "| 0.3 us | <= 0.4 us | met |" in l for l in lines)


def test_step_result_without_the_operator_cost_says_why(tmp_path, fast_png):
    with open(STEP) as f:
        step = json.load(f)
    del step["op_cost_us"]
    page, _ = bench_report.build(BENCH, write(tmp_path, "step.json", step))
    found = sections(page)
    assert "no per-operator cost" in found["Per-operator cost: a trivial operator on hal "
                                           "against plain CPU"]


def test_mem_only_result_says_why_the_collective_plots_are_absent(tmp_path, bench_doc, fast_png):
    bench_doc["figures"] = [f for f in bench_doc["figures"] if f["part"] == "mem"]
    page, _ = bench_report.build(write(tmp_path, "mem.json", bench_doc), STEP)
    found = sections(page)
    for title in ("Bus bandwidth against message size", "Time per operation against message "
                  "size", TITLES[4]):
        assert "Not drawn: part coll did not run" in found[title], title
    assert "data:image/png" in found[TITLES[6]]  # the allocator's plot is still drawn


def test_result_without_peers_draws_the_hal_alone_and_says_so(tmp_path, bench_doc, fast_png):
    bench_doc["figures"] = [f for f in bench_doc["figures"]
                            if f["implementation"] not in ("Open MPI", "Gloo", "memcpy")]
    page, _ = bench_report.build(write(tmp_path, "nopeers.json", bench_doc), STEP)
    busbw = sections(page)[TITLES[0]]
    assert "data:image/png" in busbw
    assert "Open MPI and Gloo were not measured" in busbw
    assert "the ceiling is not drawn" in busbw


def test_one_count_on_one_host_has_no_scaling_plot(tmp_path, bench_doc, fast_png):
    bench_doc["figures"] = [f for f in bench_doc["figures"]
                            if f.get("hosts") in (None, 1) and f.get("ranks") in (None, 2)]
    page, _ = bench_report.build(write(tmp_path, "one.json", bench_doc), STEP)
    assert "Not drawn: only 2 processes on one host" in sections(page)[TITLES[4]]


def test_missing_inputs_still_give_a_page(tmp_path, fast_png):
    page, table = bench_report.build(str(tmp_path / "none.json"), str(tmp_path / "no.json"))
    found = sections(page)
    assert set(found) >= {"Bus bandwidth against message size", TITLES[4], TITLES[7]}
    assert all("Not drawn" in body for body in found.values())
    assert "does not exist" in found[TITLES[7]]
    assert table.count("\n") == 1  # the header alone


def test_unreadable_input_is_a_reason_not_a_crash(tmp_path, fast_png):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    page, _ = bench_report.build(str(bad), STEP)
    assert "could not be read" in page
    assert "data:image/png" in sections(page)[TITLES[7]]


def test_main_writes_the_page_and_prints_the_table(tmp_path, capsys, fast_png):
    out = tmp_path / "sub" / "report.html"
    assert bench_report.main(["--bench", BENCH, "--step-time", STEP, "--out", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out.startswith("| part | target |")


def test_cuda_part_copies_are_drawn_against_raw_cuda(tmp_path, bench_doc, fast_png):
    copy = dict(part="cuda", backend="cuda", measurement="copy host to device", unit="GB/s",
                statistic="median", bytes=1 << 20)
    bench_doc["figures"] = [dict(copy, implementation="hal", value=20.0),
                            dict(copy, implementation="CUDA", value=21.0)]
    page, _ = bench_report.build(write(tmp_path, "cuda.json", bench_doc), STEP)
    assert "data:image/png" in sections(page)[TITLES[5]]
    assert "Not drawn: part mem did not run" in sections(page)[TITLES[6]]
