"""torch.profiler on the device: what the bridge reports to PyTorch's profiler.

Device activity (Kineto): with the device's activity requested (ProfilerActivity.PrivateUse1,
shown under the device's name), every operator that runs on the device is a "kernel" row on
the device (pid = device index, tid = stream), every copy touching device memory a
"gpu_memcpy" row (bytes, direction), every launch of a HAL program (torch.compile's kernels) a
kernel row timed with HAL timing events; each with the host-side call that issued it as a
"privateuse1_runtime" row, joined by an ac2g flow, and linked to the CPU operator around it
("External id"), so key_averages() reports device time.

Device memory: the caching allocator reports each allocation and free of device memory
(c10::reportMemoryUsageToProfiler), so profile_memory=True attributes device memory to the
operators that allocate it and the exported trace holds the [memory] events of the device.
(The process group's collectives are profiled in test_distributed.py.)
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_hal

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


def _trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


# Runtime rows with no device row: linked to the CPU operator that issued them where one did
# (a Python-level event.record() runs outside any operator).
SYNC_CALLS = ("hal_event_record", "hal_stream_wait_event")


def _check_links(events):
    """Every device row is linked to a CPU operator, every flow is paired."""
    cpu_ops = {e["args"]["External id"] for e in events if e.get("cat") == "cpu_op"}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert device
    for e in device + [e for e in events if e.get("cat") == "privateuse1_runtime"]:
        if e["name"] in SYNC_CALLS and "External id" not in e["args"]:
            continue
        assert e["args"]["External id"] in cpu_ops, e
    starts = {e["id"] for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    finishes = [e["id"] for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"]
    assert finishes and sorted(finishes) == sorted(starts)
    return device


def test_device_rows_in_the_kineto_trace(device, host_addressable, tmp_path):
    x = torch.randn(64, 64, device=device)
    host = torch.ones(8)
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    assert ProfilerActivity.PrivateUse1 in torch.profiler.supported_activities()
    with profile(activities=activities) as prof:
        y = (x @ x).relu()
        back = y.cpu()
        there = host.to(device)
    assert torch.equal(back, (x.cpu() @ x.cpu()).relu()) and there.device == device
    events = _trace(prof, tmp_path)
    device_rows = _check_links(events)
    stream = torch.get_device_module(device.type).current_stream(device).stream_id
    kernels = {e["name"]: e for e in device_rows if e["cat"] == "kernel"}
    assert {"aten::mm", "aten::relu"} <= set(kernels), sorted(kernels)
    for e in device_rows:
        assert e["pid"] == device.index and e["tid"] == stream == e["args"]["stream"], e
    copies = {e["args"]["direction"]: e["args"]["bytes"] for e in device_rows
              if e["cat"] == "gpu_memcpy" and "staging" not in e["name"]}
    assert copies == {"DtoH": 64 * 64 * 4, "HtoD": 8 * 4}, copies
    staging = [e for e in device_rows if "staging" in e["name"]]
    assert bool(staging) == (not host_addressable)  # staged devices copy around each operator
    execution = kernels["aten::mm"]["args"]["execution"]
    assert ("in place" in execution) == host_addressable

    by_key = {}
    for e in prof.key_averages():
        by_key.setdefault(e.key, []).append(e)
    assert max(e.self_device_time_total for e in by_key["aten::mm"]) > 0
    assert max(e.device_time_total for e in by_key["aten::matmul"]) > 0
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=5)
    assert "aten::mm" in table


def test_zero_fills_are_memset_rows(device, host_addressable, tmp_path):
    # torch.zeros and zero_() on dense tensors are one memset each: a stream-ordered
    # hal_memset_async, or on host-addressable memory a memset on the calling thread once the
    # stream's earlier work is done; either way a row of the current stream.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        z = torch.zeros(1000, device=device)
        torch.empty(3, 5, dtype=torch.float64, device=device).zero_()
        torch.accelerator.synchronize()
    assert torch.count_nonzero(z.cpu()) == 0
    events = _trace(prof, tmp_path)
    _check_links(events)
    memsets = [e for e in events if e.get("cat") == "gpu_memset"]
    assert sorted(e["args"]["bytes"] for e in memsets) == [3 * 5 * 8, 1000 * 4], memsets
    stream = torch.get_device_module(device.type).current_stream(device).stream_id
    assert all(e["pid"] == device.index and e["tid"] == stream and e["dur"] >= 0
               for e in memsets)
    call = "memset" if host_addressable else "hal_memset_async"
    runtime = [e for e in events if e.get("cat") == "privateuse1_runtime" and e["name"] == call]
    assert len(runtime) == 2


@pytest.mark.parametrize("launch", ["", "stream"])
def test_compiled_kernels_are_timed_on_the_stream(device, host_addressable, launch, tmp_path,
                                                  monkeypatch):
    """Each run of a compiled kernel is a kernel row of the current stream: timed with HAL
    timing events where it is launched as a HAL program, on the host clock where it runs in
    place on host-addressable memory (the default there)."""
    monkeypatch.setenv("TORCH_HAL_COMPILE_LAUNCH", launch)
    torch._dynamo.reset()
    fn = torch.compile(lambda a: (a * 2).sin() + 1)
    x = torch.randn(128, device=device)
    fn(x)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        out = fn(x)
        torch.accelerator.synchronize()
    torch.testing.assert_close(out.cpu(), (x.cpu() * 2).sin() + 1)
    events = _trace(prof, tmp_path)
    _check_links(events)
    in_place = host_addressable and launch != "stream" and \
        "host_elf" in torch_hal.programs.formats(device.index)
    call = "torch_hal kernel" if in_place else "hal_kernel_launch"
    launches = [e for e in events if e.get("cat") == "privateuse1_runtime" and e["name"] == call]
    assert launches, sorted({e.get("name") for e in events if e.get("cat")})
    ids = {e["args"]["correlation"] for e in launches}
    kernels = [e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in ids]
    assert kernels and all(e["dur"] >= 0 for e in kernels)
    # Named as the device's compiler names them: Inductor's C++ kernels, StableHLO's main.
    expected = "main" if "stablehlo" in torch_hal.programs.formats(device.index) else "cpp_"
    assert all(e["name"].startswith(expected) for e in kernels), [e["name"] for e in kernels]


def test_no_device_rows_without_the_device_activity(device, tmp_path):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        (torch.ones(4, device=device) + 1).cpu()
    cats = {e.get("cat") for e in _trace(prof, tmp_path)}
    assert not cats & {"kernel", "gpu_memcpy", "privateuse1_runtime"}, cats


def test_torch_tb_profiler_reads_the_device_kernels(device, tmp_path):
    """TensorBoard's profiler plugin (torch-tb-profiler) loads the trace with its own loader
    and finds the device's kernels. Its runtime and operator-to-kernel views know CUDA's
    runtime category only, so they stay empty for the device (not renamed after CUDA's)."""
    from torch.profiler import tensorboard_trace_handler
    from torch_tb_profiler.profiler.data import RunProfileData

    x = torch.randn(64, 64, device=device)
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    with profile(activities=activities,
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(2):
            (x @ x).relu().sum().item()
            prof.step()
    (path,) = tmp_path.glob("*.pt.trace.json")
    data = RunProfileData.parse(path.name.split(".")[0], "0", str(path), None)
    data.process()
    assert data.has_kernel
    assert {"aten::mm", "aten::relu"} <= set(data.kernel_stat.index), data.kernel_stat
    assert (data.kernel_stat.loc["aten::mm", "count"]) == 2


AGREEMENT_RUN = r"""
import json, sys, time
import torch
import torch_hal
from torch.profiler import ProfilerActivity, profile

device = torch.device(torch_hal.device_type(), 0)
kernels = "host_elf" in torch_hal.programs.formats(0)
fn = torch.compile(lambda a: (a * 2).sin() + 1) if kernels else None
host = torch.arange(4096, dtype=torch.float32)
x = host.to(device)
if fn is not None:
    fn(x)  # compiled before the profiled part
torch.accelerator.synchronize()
start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    y = host.to(device)             # host to device
    z = torch.empty_like(y)
    z.copy_(y)                      # within the device
    y.zero_()                       # a fill
    if fn is not None:
        out = fn(z)                 # compiled kernels, launched on the stream
    back = z.cpu()                  # device to host
    torch.accelerator.synchronize()
end = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
assert torch.equal(back, host)
prof.export_chrome_trace(sys.argv[1])
print(json.dumps({"start_ns": start, "end_ns": end}))
"""


def test_hal_trace_and_profiler_agree(device_type, tmp_path):
    """The trace layer's file (HAL_LAYERS=trace) and torch.profiler's trace of the same run
    describe the device work that went through HAL calls alike (hal/hal_activity.h): the same
    rows, in the same order, with the same names, categories, bytes and directions. Work the
    bridge runs on the calling thread (host-addressable memory) makes no HAL call, so only the
    profiler shows it."""
    profiler_path = tmp_path / "profiler.json"
    # The child's emulated NeuronCores are its own (this process may hold the run's).
    env = dict(os.environ, HAL_LAYERS="trace", HAL_TRACE_FILE=str(tmp_path / "hal-%p.json"),
               TORCH_HAL_COMPILE_LAUNCH="stream",
               NEURON_EMU_LOCK_DIR=str(tmp_path / "neuron-locks"))
    proc = subprocess.run([sys.executable, "-c", AGREEMENT_RUN, str(profiler_path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    window = json.loads(proc.stdout.strip().splitlines()[-1])
    (hal_path,) = tmp_path.glob("hal-*.json")
    categories = ("kernel", "gpu_memcpy", "gpu_memset")

    def described(e):
        args = e.get("args", {})
        return (e["name"], e["cat"], args.get("bytes"), args.get("direction"))

    events = json.loads(profiler_path.read_text())["traceEvents"]
    calls = {e["args"]["correlation"]: e["name"] for e in events
             if e.get("cat") == "privateuse1_runtime"}
    profiled = sorted((e for e in events if e.get("cat") in categories
                       and calls.get(e["args"]["correlation"], "").startswith("hal_")),
                      key=lambda e: e["ts"])
    traced = sorted((e for e in json.loads(hal_path.read_text())["traceEvents"]
                     if e.get("ph") == "X" and e.get("cat") in categories
                     and window["start_ns"] <= e["ts"] * 1000 <= window["end_ns"]),
                    key=lambda e: e["ts"])
    assert profiled, sorted({(e.get("cat"), e.get("name")) for e in events})
    assert [described(e) for e in traced] == [described(e) for e in profiled]


def test_event_records_and_waits_are_runtime_rows(device, devmod, tmp_path):
    """Recording an event and making a stream wait for it are runtime rows of the calling
    thread (as CUDA's cudaEventRecord and cudaStreamWaitEvent are), with their device and
    stream, linked to the CPU operator around them where there is one (not here: Python calls
    them); they have no device row and no flow."""
    side = devmod.Stream()
    x = torch.ones(1024, device=device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        with torch.profiler.record_function("sync_work"):
            done = devmod.Event()
            done.record()
            side.wait_event(done)
            with devmod.stream(side):
                y = x * 2
            devmod.current_stream().wait_stream(side)
        torch.accelerator.synchronize()
    assert torch.equal(y.cpu(), torch.full((1024,), 2.0))
    events = _trace(prof, tmp_path)
    _check_links(events)
    runtime = [e for e in events if e.get("cat") == "privateuse1_runtime"]
    records = [e for e in runtime if e["name"] == SYNC_CALLS[0]]
    waits = [e for e in runtime if e["name"] == SYNC_CALLS[1]]
    assert len(records) >= 2 and len(waits) >= 2, sorted({e["name"] for e in runtime})
    assert {e["args"]["stream"] for e in waits} >= {side.stream_id}
    assert all(e["args"]["device"] == device.index for e in records + waits)
    device_rows = {e["name"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy")}
    assert not device_rows & set(SYNC_CALLS)
    flows = {e["id"] for e in events if e.get("cat") == "ac2g"}
    assert not {e["args"]["correlation"] for e in records + waits} & flows


def test_memory_timeline_shows_device_memory(device, tmp_path):
    """torch.profiler's memory timeline (export_memory_timeline, profile_memory=True) for the
    device: parameters, gradients and activations of a training step, from the allocations
    the caching allocator reports."""
    model = torch.nn.Linear(256, 256).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 256, device=device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(2):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    path = tmp_path / "timeline.json"
    with pytest.warns(FutureWarning):  # deprecated upstream, still what users call
        prof.export_memory_timeline(str(path), device=str(device))
    times, sizes = json.loads(path.read_text())
    assert len(times) == len(sizes) > 0
    weights = (256 * 256 + 256) * 4
    assert max(sum(row) for row in sizes) >= 2 * weights  # parameters and their gradients
