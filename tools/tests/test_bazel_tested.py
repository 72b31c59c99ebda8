"""tools/bazel_tested.py: the test log directories of the targets a build event file tested."""

import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location("bazel_tested",
                                              os.path.join(HERE, os.pardir, "bazel_tested.py"))
bazel_tested = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bazel_tested)


def write_events(path, events):
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_one_directory_per_tested_target_whatever_else_the_file_holds(tmp_path):
    events = tmp_path / "events.json"
    write_events(events, [
        {"id": {"started": {}}, "started": {"command": "test"}},
        {"id": {"targetCompleted": {"label": "//hal:hal"}}, "completed": {"success": True}},
        {"id": {"testResult": {"label": "//conformance:conformance_cpu", "shard": 1}}},
        {"id": {"testSummary": {"label": "//conformance:conformance_cpu"}},
         "testSummary": {"overallStatus": "PASSED"}},
        {"id": {"testSummary": {"label": "//hal/tests/comm:bootstrap_test"}},
         "testSummary": {"overallStatus": "FAILED"}},
        {"id": {"testSummary": {"label": "//:top_level_test"}}, "testSummary": {}},
    ])
    assert list(bazel_tested.tested_dirs(str(events))) == [
        "conformance/conformance_cpu", "hal/tests/comm/bootstrap_test", "top_level_test"]


def test_a_run_that_tested_nothing_lists_nothing(tmp_path):
    events = tmp_path / "events.json"
    write_events(events, [{"id": {"started": {}}, "started": {"command": "test"}}])
    assert list(bazel_tested.tested_dirs(str(events))) == []
