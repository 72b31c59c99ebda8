#!/bin/sh
# tools/merge_traces.py puts HAL events on a torch.profiler trace's clock: a HAL event stamped
# T (CLOCK_MONOTONIC us) with offset O lands at T + O - base, where base is the torch trace's
# baseTimeNanoseconds / 1000; without a torch trace, HAL traces of several processes share one
# epoch-based timeline; a file that is neither is refused.
set -eu
script="$1"
dir="${TEST_TMPDIR:-$(mktemp -d)}/merge"
mkdir -p "$dir"
cat >"$dir/torch.json" <<'JSON'
{"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000,
 "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 7,
                  "ts": 5000.0, "dur": 10.0}]}
JSON
cat >"$dir/hal1.json" <<'JSON'
{"displayTimeUnit": "ms",
 "otherData": {"producer": "torch-hal trace layer", "format_version": 1,
               "clock": "CLOCK_MONOTONIC", "ts_unit": "us",
               "monotonic_to_unix_epoch_us": 1699999999000000, "pid": 7},
 "traceEvents": [
 {"name": "thread_name", "ph": "M", "pid": 7, "tid": 1000000001, "args": {"name": "s1"}},
 {"name": "memcpy_async", "cat": "hal", "ph": "X", "ts": 1000005.5, "dur": 2.0, "pid": 7,
  "tid": 7, "args": {"status": "HAL_OK"}}
]}
JSON
cat >"$dir/hal2.json" <<'JSON'
{"otherData": {"producer": "torch-hal trace layer", "monotonic_to_unix_epoch_us": 1699999999000100,
               "pid": 8},
 "traceEvents": [{"name": "mem_alloc", "cat": "hal", "ph": "X", "ts": 1000000.0, "dur": 1.0,
                  "pid": 8, "tid": 8, "args": {}}]}
JSON
python3 "$script" -o "$dir/merged.json" "$dir/torch.json" "$dir/hal1.json"
python3 "$script" -o "$dir/ranks.json" "$dir/hal1.json" "$dir/hal2.json"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/merged.json"))
assert m["baseTimeNanoseconds"] == 1700000000000000000
ev = {e["name"]: e for e in m["traceEvents"]}
# 1000005.5 + 1699999999000000 - 1700000000000000 = 5.5
assert abs(ev["memcpy_async"]["ts"] - 5.5) < 1e-6, ev["memcpy_async"]
assert ev["aten::add"]["ts"] == 5000.0
assert "ts" not in ev["thread_name"] and ev["thread_name"]["tid"] == 1000000001
assert m["otherData"]["hal_traces"][0]["pid"] == 7
r = json.load(open(d + "/ranks.json"))
ev = {e["name"]: e for e in r["traceEvents"]}
# epoch: 1700000000000005.5 and 1700000000000100.0; relative to the earliest whole microsecond
assert abs(ev["memcpy_async"]["ts"] - 0.5) < 1e-6, ev
assert abs(ev["mem_alloc"]["ts"] - 95.0) < 1e-6, ev
assert r["baseTimeNanoseconds"] == 1700000000000005000
print("merge_traces: ok")
PY
# Two non-HAL traces, or none at all: refused.
if python3 "$script" -o "$dir/x.json" "$dir/torch.json" "$dir/torch.json" 2>/dev/null; then
    echo "two torch traces were accepted"; exit 1
fi
if python3 "$script" -o "$dir/x.json" "$dir/torch.json" 2>/dev/null; then
    echo "a merge without HAL traces was accepted"; exit 1
fi
echo PASS
