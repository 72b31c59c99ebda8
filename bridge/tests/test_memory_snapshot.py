"""torch.<device>.memory._record_memory_history() and _snapshot(): the device allocator's
segments and blocks (the HAL's hal_allocator_snapshot) and its recorded allocations and frees,
with the stacks that made them, in the layout torch.cuda.memory._snapshot() has, read here with
torch.cuda._memory_viz, the module behind pytorch.org/memory_viz."""

import pickle

import pytest
import torch
from torch.cuda import _memory_viz

MIB = 1 << 20


@pytest.fixture
def history(devmod):
    devmod.memory._record_memory_history(stacks="python")
    yield devmod.memory
    devmod.memory._record_memory_history(enabled=None)


def _allocate_on(device, nbytes):  # a frame of its own, to find in the stacks
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def _blocks(snapshot, device):
    return [(segment, block) for segment in snapshot["segments"]
            if segment["device"] == device.index for block in segment["blocks"]]


def test_snapshot_tiles_every_segment_and_agrees_with_the_statistics(device, devmod, history):
    keep = [_allocate_on(device, n) for n in (1000, 5 * MIB, 70 * 1024)]
    dropped = _allocate_on(device, 3 * MIB)
    del dropped
    snapshot = history._snapshot()
    segments = [s for s in snapshot["segments"] if s["device"] == device.index]
    assert segments
    for segment in segments:
        address = segment["address"]
        for block in segment["blocks"]:  # the blocks cover the segment, in order, no gaps
            assert block["address"] == address
            assert block["state"] in ("active_allocated", "active_pending_free", "inactive")
            address += block["size"]
        assert address == segment["address"] + segment["total_size"]
        allocated = [b for b in segment["blocks"] if b["state"] == "active_allocated"]
        assert segment["allocated_size"] == sum(b["size"] for b in allocated)
        assert segment["requested_size"] == sum(b["requested_size"] for b in allocated)
        assert segment["segment_type"] in ("small", "large")
    assert sum(s["total_size"] for s in segments) == devmod.memory_reserved(device)
    assert sum(s["allocated_size"] for s in segments) == devmod.memory_allocated(device)

    by_address = {b["address"]: b for _, b in _blocks(snapshot, device)}
    for tensor, nbytes in zip(keep, (1000, 5 * MIB, 70 * 1024)):
        block = by_address[tensor.data_ptr()]
        assert block["state"] == "active_allocated" and block["requested_size"] == nbytes
        assert block["frames"][0]["name"] == "_allocate_on"
        assert any(frame["filename"].endswith("test_memory_snapshot.py")
                   for frame in block["frames"])


def test_the_trace_records_allocations_and_frees_with_their_stacks(device, history):
    x = _allocate_on(device, 2 * MIB + 3)
    address = x.data_ptr()
    del x
    trace = history._snapshot()["device_traces"][device.index]
    mine = [e for e in trace if e["addr"] == address and e["size"] == 2 * MIB + 3]
    assert [e["action"] for e in mine[-3:]] == ["alloc", "free_requested", "free_completed"]
    alloc = mine[-3]
    assert alloc["frames"][0]["name"] == "_allocate_on"
    assert alloc["stream"] != 0 and all(e["stream"] == alloc["stream"] for e in mine[-3:])
    assert mine[-3]["time_us"] <= mine[-1]["time_us"]
    # context="all" (the default) records the stacks of frees too.
    assert mine[-2]["frames"] and mine[-2]["frames"][0]["filename"].endswith(
        "test_memory_snapshot.py")


def test_the_trace_records_segments_and_out_of_memory(device, devmod, history):
    """Segments the allocator maps and releases are "segment_alloc" / "segment_free" actions
    (the first before the allocation that needed it, with its stack, which the segment keeps
    in the snapshot), and an allocation that fails for want of memory is an "oom" with the
    bytes asked for and the device's free bytes, as torch.cuda.memory._snapshot() reports
    CUDA's; segments there before the recording started are not reported as new."""
    devmod.empty_cache()  # no cached segments of earlier tests: only what this test frees
    old = _allocate_on(device, 40 * MIB)  # its segment predates the history of this test
    devmod.memory._record_memory_history(enabled=None)
    devmod.memory._record_memory_history(stacks="python")
    x = _allocate_on(device, 48 * MIB + 5)
    address = x.data_ptr()
    (holding,) = [s for s in devmod.memory._snapshot()["segments"] if s["device"] == device.index
                  and s["address"] <= address < s["address"] + s["total_size"]]
    assert holding["frames"] and holding["frames"][0]["name"] == "_allocate_on", holding
    del x, old
    devmod.empty_cache()
    with pytest.raises(torch.OutOfMemoryError, match="hal_allocator_alloc"):
        _allocate_on(device, 1 << 60)
    trace = devmod.memory._snapshot()["device_traces"][device.index]
    segments = [e for e in trace if e["action"].startswith("segment_")]
    mapped = [e for e in segments if e["action"] == "segment_alloc"]
    assert len(mapped) == 1, segments
    segment = mapped[0]
    assert segment["addr"] <= address < segment["addr"] + segment["size"], (segment, address)
    assert segment["addr"] == holding["address"] and segment["frames"][0]["name"] == "_allocate_on"
    actions = [e["action"] for e in trace]
    alloc = next(i for i, e in enumerate(trace) if e["action"] == "alloc" and e["addr"] == address)
    assert actions.index("segment_alloc") < alloc
    released = [e for e in segments if e["action"] == "segment_free"]
    assert {e["addr"] for e in released} >= {segment["addr"]}, segments
    assert len(released) == 2  # the new segment and the one from before the recording
    (oom,) = [e for e in trace if e["action"] == "oom"]
    assert oom["size"] == 1 << 60 and oom["device_free"] > 0 and "addr" not in oom
    text = _memory_viz.trace(devmod.memory._snapshot())
    assert "OutOfMemoryError" in text


def test_memory_viz_reads_the_snapshot(device, history, tmp_path):
    keep = _allocate_on(device, 3 * MIB)
    gone = _allocate_on(device, MIB)
    del gone
    snapshot = history._snapshot()
    assert "segments: " in _memory_viz.segsum(snapshot)
    assert f"Device {device.index}" in _memory_viz.trace(snapshot)
    flamegraph = _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    assert "_allocate_on" in flamegraph and "active_allocated" in flamegraph
    for html in (_memory_viz.trace_plot(snapshot), _memory_viz.segment_plot(snapshot)):
        assert html.startswith("<!DOCTYPE html>") or "<html" in html
    path = tmp_path / "snapshot.pickle"
    history._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert loaded.keys() >= {"segments", "device_traces"}
    assert any(b["address"] == keep.data_ptr() for _, b in _blocks(loaded, device))


def test_state_only_keeps_stacks_and_no_trace(device, devmod):
    devmod.memory._record_memory_history(enabled="state", stacks="python")
    try:
        x = _allocate_on(device, MIB)
        snapshot = devmod.memory._snapshot()
        assert all(not trace for trace in snapshot["device_traces"])
        block = next(b for _, b in _blocks(snapshot, device) if b["address"] == x.data_ptr())
        assert block["frames"][0]["name"] == "_allocate_on"
    finally:
        devmod.memory._record_memory_history(enabled=None)


def test_max_entries_keeps_the_newest(device, devmod):
    devmod.memory._record_memory_history(stacks="python", max_entries=4)
    try:
        for n in (1000, 2000, 3000):
            _allocate_on(device, n)  # freed at once: alloc, free_requested, free_completed
        trace = devmod.memory._snapshot()["device_traces"][device.index]
        assert [(e["action"], e["size"]) for e in trace] == [
            ("free_completed", 2000), ("alloc", 3000), ("free_requested", 3000),
            ("free_completed", 3000)]
    finally:
        devmod.memory._record_memory_history(enabled=None)


def test_stopping_drops_the_history_and_the_stacks(device, devmod):
    devmod.memory._record_memory_history(stacks="python")
    x = _allocate_on(device, MIB)
    devmod.memory._record_memory_history(enabled=None)
    snapshot = devmod.memory._snapshot()
    assert all(not trace for trace in snapshot["device_traces"])
    block = next(b for _, b in _blocks(snapshot, device) if b["address"] == x.data_ptr())
    assert block["frames"] == [] and block["state"] == "active_allocated"


@pytest.mark.parametrize("arguments, word", [
    (dict(enabled="everything"), "enabled"),
    (dict(context="some"), "context"),
    (dict(stacks="cpp"), "stacks"),
])
def test_bad_arguments_are_refused(devmod, arguments, word):
    with pytest.raises(ValueError, match=f"_record_memory_history: {word} must be"):
        devmod.memory._record_memory_history(**arguments)
    assert all(not trace for trace in devmod.memory._snapshot()["device_traces"])
