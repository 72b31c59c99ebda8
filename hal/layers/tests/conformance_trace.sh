#!/bin/sh
# The conformance suite on the cpu backend under HAL_LAYERS=trace (set by the test rule): it must
# pass exactly as without the layer, and every process it ran (the suite, its rank and probe
# processes) must leave a complete, valid Chrome trace; the suite's own trace must hold host
# calls and device-side spans. The traces stay in the test's temporary directory.
set -eu
dir="${TEST_TMPDIR:-$(mktemp -d)}/hal-traces"
mkdir -p "$dir"
HAL_TRACE_FILE="$dir/hal-trace-%p.json"
export HAL_TRACE_FILE
"$@"
python3 - "$dir" <<'PY'
import collections, glob, json, os, sys
files = sorted(glob.glob(os.path.join(sys.argv[1], "hal-trace-*.json")))
if not files:
    sys.exit("conformance_cpu_trace: no trace was written")
names, stream_spans, events = collections.Counter(), 0, 0
for path in files:
    try:
        doc = json.load(open(path))
    except ValueError as e:
        sys.exit(f"conformance_cpu_trace: {path} is not valid JSON: {e}")
    other = doc.get("otherData", {})
    if other.get("producer") != "torch-hal trace layer" or "monotonic_to_unix_epoch_us" not in other:
        sys.exit(f"conformance_cpu_trace: {path}: otherData is incomplete: {other}")
    for e in doc["traceEvents"]:
        events += 1
        if e.get("ph") == "X":
            for key in ("name", "ts", "dur", "pid", "tid", "args"):
                if key not in e:
                    sys.exit(f"conformance_cpu_trace: {path}: event without {key}: {e}")
            names[e["name"]] += 1
            if e["tid"] >= 1000000000:
                stream_spans += 1
for needed in ("mem_alloc", "memcpy_async", "stream_synchronize", "event_record", "hal_allreduce"):
    if not names[needed]:
        sys.exit(f"conformance_cpu_trace: no '{needed}' event in {len(files)} traces")
if not stream_spans:
    sys.exit("conformance_cpu_trace: no device-side spans")
print(f"conformance_cpu_trace: {len(files)} traces, {events} events, "
      f"{stream_spans} device-side spans, {len(names)} distinct calls")
PY
