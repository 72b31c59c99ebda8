"""tools/openreg_run.py's check: case ids from JUnit XML, the expected-failures file, verdicts."""

import importlib.util
import os
import xml.etree.ElementTree as ET

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location("openreg_run",
                                              os.path.join(HERE, os.pardir, "openreg_run.py"))
openreg_run = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(openreg_run)

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="out.neuron.test_device.TestDevice" name="test_ok" time="0.1"/>
<testcase classname="out.neuron.test_device.TestDevice" name="test_bad" time="0.1">
  <failure message="boom"/></testcase>
<testcase classname="out.neuron.test_device.TestDevice" name="test_skip" time="0">
  <skipped message="upstream skip"/></testcase>
<testcase classname="" name="out.neuron.test_device" time="0"><error message="x"/></testcase>
</testsuite></testsuites>
"""


def test_case_ids_and_outcomes(tmp_path):
    path = tmp_path / "test_device.xml"
    path.write_text(JUNIT)
    assert openreg_run.read_cases(str(path), "test_device.py") == {
        "TestDevice::test_ok": "passed", "TestDevice::test_bad": "failed",
        "TestDevice::test_skip": "skipped", "(collection)": "error"}


def test_expected_file_lines(tmp_path):
    path = tmp_path / "expected.txt"
    path.write_text("# comment\n\n* test_a.py::C::t1 both devices\n"
                    "neuron test_b.py::(collection) one device\n")
    assert openreg_run.read_expected(str(path)) == {
        ("hal", "test_a.py", "C::t1"): "both devices",
        ("neuron", "test_a.py", "C::t1"): "both devices",
        ("neuron", "test_b.py", "(collection)"): "one device"}
    path.write_text("hal test_a.py::C::t1\n")  # no reason
    with pytest.raises(ValueError, match="expected"):
        openreg_run.read_expected(str(path))


def test_verdicts(tmp_path):
    results = {("hal", "test_a.py"): ({"C::ok": "passed", "C::known": "failed",
                                       "C::new": "failed", "C::fixed": "passed",
                                       "C::skip": "skipped"}, "(3 s)"),
               ("hal", "test_b.py"): (None, "stopped by the 300 s limit (300 s)")}
    expected = {("hal", "test_a.py", "C::known"): "a reason",
                ("hal", "test_a.py", "C::fixed"): "was broken",
                ("hal", "test_a.py", "C::gone"): "renamed upstream"}
    rows = openreg_run.check(results, expected, ["hal"])
    verdicts = {(r[1], r[2]): r[3] for r in rows}
    assert verdicts[("test_a.py", "C::ok")] == "ok"
    assert verdicts[("test_a.py", "C::skip")] == "ok"
    assert verdicts[("test_a.py", "C::known")] == "xfail"
    assert verdicts[("test_a.py", "C::new")] == "error"  # a failure nobody listed
    assert verdicts[("test_a.py", "C::fixed")] == "error"  # listed but passes: stale line
    assert verdicts[("test_a.py", "C::gone")] == "error"  # listed but did not run
    assert verdicts[("test_b.py", "(file)")] == "error"  # no results at all
    out = tmp_path / "gate" / "test.xml"
    openreg_run.write_junit(str(out), rows)
    suite = ET.parse(out).getroot()
    assert suite.get("failures") == "4" and suite.get("tests") == str(len(rows))
    skipped = [tc.find("skipped").get("message") for tc in suite.iter("testcase")
               if tc.find("skipped") is not None]
    assert "expected failure: a reason" in skipped and "skipped by the test" in skipped
