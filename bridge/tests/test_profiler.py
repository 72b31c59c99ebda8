"""torch.profiler on the device: what the bridge reports to PyTorch's profiler.

Device memory: the caching allocator reports each allocation and free of device memory
(c10::reportMemoryUsageToProfiler), so profile_memory=True attributes device memory to the
operators that allocate it and the exported trace holds the [memory] events of the device.
(The process group's collectives are profiled in test_distributed.py.)
"""

import json

import torch
from torch.profiler import ProfilerActivity, profile

MIB = 1 << 20


def test_device_memory_reaches_the_profiler(device, tmp_path):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x = torch.empty(MIB, device=device)  # 4 MiB
        y = x.add(1)
        del x, y
    by_op = {e.key: e for e in prof.key_averages()}
    assert by_op["aten::empty"].self_device_memory_usage == 4 * MIB
    assert by_op["aten::empty"].self_cpu_memory_usage == 0
    assert by_op["aten::add"].device_memory_usage >= 4 * MIB

    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    device_type = int(torch._C._autograd.DeviceType.PrivateUse1)
    memory = [e["args"] for e in events
              if e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type]
    assert [m["Bytes"] for m in memory if abs(m["Bytes"]) == 4 * MIB] == [4 * MIB, 4 * MIB,
                                                                       -4 * MIB, -4 * MIB]
    assert all(m["Device Id"] == device.index for m in memory)
    first = next(m for m in memory if m["Bytes"] == 4 * MIB)
    assert first["Total Allocated"] >= 4 * MIB and first["Total Reserved"] >= 4 * MIB


def test_nothing_is_reported_while_the_profiler_does_not_record_memory(device):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.empty(MIB, device=device).add_(1)
    assert all(e.device_memory_usage == 0 for e in prof.key_averages())
