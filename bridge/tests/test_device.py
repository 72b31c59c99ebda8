"""Device-generic behaviour of the torch_hal device: what a CUDA training script relies on.

Runs on the backend TORCH_HAL_BACKEND selects; tests that need a second device or a
host-addressable device say so.
"""

import io
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_hal


# ---- Loading and the device module ------------------------------------------------------------

def test_autoloaded_and_renamed(device_type, backend):
    assert torch._C._get_privateuse1_backend_name() == device_type
    assert hasattr(torch, device_type)
    assert torch.accelerator.current_accelerator().type == device_type
    expected = {"cpu": "hal", "trainium": "neuron"}.get(backend)
    if expected:
        assert device_type == expected


def test_device_module_basics(device_type, devmod):
    assert devmod.is_available()
    n = devmod.device_count()
    assert n >= 1 and torch.accelerator.device_count() == n
    assert devmod.current_device() == 0
    with devmod.device(n - 1):
        assert devmod.current_device() == n - 1
        assert torch.accelerator.current_device_index() == n - 1
    assert devmod.current_device() == 0
    props = devmod.get_device_properties(0)
    assert props.total_memory > 0 and props.name == devmod.get_device_name(0)
    assert devmod.is_bf16_supported()
    t = torch.ones(2, device=device_type)
    assert t.device == torch.device(device_type, 0)
    # generated methods
    assert getattr(t, f"is_{device_type}")
    assert getattr(torch.ones(2), device_type)().device.type == device_type
    m = getattr(torch.nn.Linear(2, 2), device_type)()
    assert m.weight.device.type == device_type


def test_set_device_changes_default_placement(device_type, devmod):
    if devmod.device_count() < 2:
        pytest.skip("needs two devices")
    devmod.set_device(1)
    try:
        assert torch.empty(1, device=device_type).device.index == 1
        torch.accelerator.set_device_index(0)
        assert devmod.current_device() == 0
    finally:
        devmod.set_device(0)


def test_error_messages_name_the_backend(device_type, backend, devmod):
    with pytest.raises(RuntimeError, match=f"backend '{backend}'"):
        torch.empty(1, device=f"{device_type}:{devmod.device_count()}")
    with pytest.raises(torch.OutOfMemoryError, match=f"backend '{backend}'.*OUT_OF_DEVICE_MEMORY"):
        torch.empty(1 << 60, dtype=torch.uint8, device=device_type)


@pytest.mark.own_backend
def test_failed_backend_keeps_import_torch_working(tmp_path):
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            import torch
        import torch_hal
        assert not torch_hal.is_loaded()
        assert torch._C._get_privateuse1_backend_name() == "privateuseone"
        messages = [str(w.message) for w in caught if "torch_hal" in str(w.message)]
        assert len(messages) == 1, messages
        print(messages[0])
    """)
    env = dict(os.environ, TORCH_HAL_BACKEND="no_such_backend")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "no_such_backend" in proc.stdout and "HAL_ERROR_NOT_FOUND" in proc.stdout


SHARING_SCRIPT = """
import queue, sys
import torch
import torch.multiprocessing as mp


def consumer(inbox, outbox):
    for _ in range(2):
        try:
            outbox.put(("ok", inbox.get(timeout=60).sum().item()))
        except RuntimeError as exc:
            outbox.put(("error", str(exc)))


def takes_an_argument(tensor):
    pass


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[2])
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=consumer, args=(inbox, outbox))
    child.start()
    inbox.put(torch.ones(4, device=sys.argv[1]))   # the device's: an error in the receiver
    inbox.put(torch.ones(4))                       # the CPU's: shared as before
    for _ in range(2):
        print(*outbox.get(timeout=120))
    child.join(60)
    print("exitcode", child.exitcode)
    # A device tensor as a spawned child's argument: the child fails at once with the error.
    child = ctx.Process(target=takes_an_argument, args=(torch.ones(2, device=sys.argv[1]),))
    child.start()
    child.join(120)
    print("argument child exitcode", child.exitcode)
"""


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_multiprocessing_refuses_device_tensors_at_once(device_type, tmp_path, method):
    """A device tensor sent through torch.multiprocessing raises a clear error in the receiver
    (its pickling used to fail in the sender's feeder thread and leave the receiver waiting
    forever); CPU tensors still go through shared memory."""
    script = tmp_path / "sharing.py"
    script.write_text(SHARING_SCRIPT)
    # An emulated machine of its own for the script (this process holds the emulator's cores),
    # whose lock files go with tmp_path.
    env = dict(os.environ, NEURON_EMU_LOCK_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, str(script), device_type, method], env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("error torch_hal: a Tensor on the " + device_type), lines
    assert "cannot be sent to another process" in lines[0] and "tensor.cpu()" in lines[0]
    assert lines[1] == "ok 4.0" and lines[2] == "exitcode 0", lines
    if method == "spawn":  # (a forked child inherits its arguments: nothing is pickled)
        assert lines[3] == "argument child exitcode 1", lines
    assert "cannot be sent to another process" in proc.stderr


# ---- Streams and events -----------------------------------------------------------------------

def test_side_stream_and_wait_stream(device_type, devmod):
    a = torch.randn(256, 256, device=device_type)
    side = devmod.Stream()
    assert side != devmod.default_stream() and side.device_type == devmod.default_stream().device_type
    side.wait_stream(devmod.current_stream())
    with devmod.stream(side):
        assert devmod.current_stream() == side
        b = a @ a
        c = b + 1
    assert devmod.current_stream() == devmod.default_stream()
    devmod.current_stream().wait_stream(side)
    torch.testing.assert_close((c - 1).cpu(), (a.cpu() @ a.cpu()), rtol=1e-4, atol=1e-3)


def test_stream_priorities_and_pool(devmod):
    low = devmod.Stream(priority=0)
    high = devmod.Stream(priority=-1)
    props = devmod.get_device_properties(0)
    assert low.priority == 0
    assert high.priority == props.stream_priority_greatest
    assert low.stream_id != 0 and high.stream_id != low.stream_id
    # torch.Stream / torch.accelerator understand them
    torch.accelerator.set_stream(high)
    assert torch.accelerator.current_stream().stream_id == high.stream_id
    torch.accelerator.set_stream(devmod.default_stream())


def test_event_ordering_and_timing(device_type, devmod):
    x = torch.zeros(1 << 16, device=device_type)
    start = devmod.Event(enable_timing=True)
    end = devmod.Event(enable_timing=True)
    assert start.query()  # never recorded: complete
    side = devmod.Stream()
    start.record()
    side.wait_event(start)
    with devmod.stream(side):
        x.add_(1)
        done = devmod.Event()
        done.record(side)
    done.wait(devmod.current_stream())
    y = x * 2
    end.record()
    end.synchronize()
    assert done.query() and end.query()
    assert start.elapsed_time(end) >= 0
    assert torch.equal(y.cpu(), torch.full((1 << 16,), 2.0))
    # plain torch.Event works too
    e = torch.Event(device=device_type, enable_timing=True)
    e.record()
    e.synchronize()
    assert e.query()


def test_record_stream_keeps_memory_until_stream_done(device_type, devmod):
    side = devmod.Stream()
    t = torch.ones(1 << 20, device=device_type)
    side.wait_stream(devmod.current_stream())  # the fill is queued on the current stream
    with devmod.stream(side):
        u = t * 3
    t.record_stream(side)
    del t
    devmod.current_stream().wait_stream(side)
    assert u.sum().item() == 3 * (1 << 20)


def test_synchronize(device_type, devmod):
    x = torch.randn(1000, device=device_type)
    devmod.synchronize()
    torch.accelerator.synchronize()
    assert devmod.current_stream().query()
    assert x.numel() == 1000


# ---- Memory ---------------------------------------------------------------------------------

def test_memory_stats_follow_allocations(device_type, devmod):
    devmod.empty_cache()
    base = devmod.memory_allocated()
    assert base == torch.accelerator.memory_allocated()
    t = torch.empty(4 << 20, dtype=torch.uint8, device=device_type)
    assert devmod.memory_allocated() >= base + (4 << 20)
    assert devmod.max_memory_allocated() >= devmod.memory_allocated()
    reserved = devmod.memory_reserved()
    assert reserved >= devmod.memory_allocated()
    stats = devmod.memory_stats()
    assert stats["allocated_bytes.all.current"] == devmod.memory_allocated()
    assert stats["reserved_bytes.all.current"] == reserved
    del t
    assert devmod.memory_allocated() == base
    assert devmod.memory_reserved() == reserved  # cached
    devmod.empty_cache()
    assert devmod.memory_reserved() < reserved
    devmod.reset_peak_memory_stats()
    assert devmod.max_memory_allocated() == devmod.memory_allocated()
    free, total = devmod.mem_get_info()
    assert 0 < free <= total


# ---- Pinned memory and copies --------------------------------------------------------------------

def test_pin_memory(device_type):
    cpu = torch.randn(1000)
    assert not cpu.is_pinned()
    pinned = cpu.pin_memory()
    assert pinned.is_pinned() and torch.equal(pinned, cpu)
    assert torch.empty(10, pin_memory=True).is_pinned()


def test_non_blocking_copies(device_type, devmod):
    src = torch.arange(1 << 18, dtype=torch.float32).pin_memory()
    dev = src.to(device_type, non_blocking=True)
    back = dev.to("cpu", non_blocking=True)
    assert back.is_pinned()  # non_blocking device->host copies land in pinned memory
    devmod.current_stream().synchronize()
    assert torch.equal(back, src)
    dst = torch.empty(1 << 18, pin_memory=True)
    dst.copy_(dev * 2, non_blocking=True)
    devmod.synchronize()
    assert torch.equal(dst, src * 2)


def test_copies_every_direction(device_type, devmod):
    cpu = torch.randn(6, 5, dtype=torch.float64)
    d0 = cpu.to(device_type)
    torch.testing.assert_close(d0.cpu(), cpu)
    # non-contiguous on either side, dtype conversion, broadcasting
    torch.testing.assert_close(d0.t().contiguous().cpu(), cpu.t().contiguous())
    torch.testing.assert_close(cpu.t().to(device_type).cpu(), cpu.t())
    half = torch.empty(5, 6, dtype=torch.float16, device=device_type)
    half.copy_(d0.t())
    torch.testing.assert_close(half.cpu(), cpu.t().half())
    strided_dst = torch.zeros(6, 10, dtype=torch.float32, device=device_type)[:, ::2]
    strided_dst.copy_(cpu)
    torch.testing.assert_close(strided_dst.cpu(), cpu.float())
    host_dst = torch.zeros(10, 6, dtype=torch.float32)[::2]
    host_dst.copy_(d0.t())
    torch.testing.assert_close(host_dst, cpu.t().float())
    row = torch.arange(5.0, device=device_type)
    d0.copy_(row)  # broadcast
    assert torch.equal(d0.cpu(), torch.arange(5.0, dtype=torch.float64).expand(6, 5))
    if devmod.device_count() > 1:
        d1 = d0.to(f"{device_type}:1")
        assert d1.device.index == 1 and torch.equal(d1.cpu(), d0.cpu())
        back = torch.empty(5, 6, dtype=torch.float32, device=device_type)
        back.copy_(d1.t())  # cross-device, non-contiguous, with conversion
        torch.testing.assert_close(back.cpu(), d0.cpu().t().float())


# ---- DataLoader ----------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_pin_memory(device_type, workers):
    data = torch.utils.data.TensorDataset(torch.randn(64, 3), torch.arange(64))
    loader = torch.utils.data.DataLoader(data, batch_size=16, pin_memory=True,
                                         num_workers=workers)
    seen = 0
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        x = x.to(device_type, non_blocking=True)
        seen += int(y.to(device_type, non_blocking=True).numel())
        assert x.device.type == device_type
    assert seen == 64


# ---- RNG ------------------------------------------------------------------------------------------

def test_rng_reproducible(device_type, devmod):
    devmod.manual_seed(42)
    a = torch.rand(100, device=device_type)
    devmod.manual_seed(42)
    b = torch.rand(100, device=device_type)
    assert torch.equal(a.cpu(), b.cpu())
    assert devmod.initial_seed() == 42
    state = devmod.get_rng_state()
    c = torch.randn(50, device=device_type)
    devmod.set_rng_state(state)
    d = torch.randn(50, device=device_type)
    assert torch.equal(c.cpu(), d.cpu())
    states = devmod.get_rng_state_all()
    assert len(states) == devmod.device_count()
    devmod.set_rng_state_all(states)
    # torch.manual_seed seeds the device too; the generator matches CPU's algorithm
    torch.manual_seed(7)
    e = torch.rand(10)
    torch.manual_seed(7)
    f = torch.rand(10, device=device_type)
    assert torch.equal(e, f.cpu())
    g = torch.Generator(device=device_type).manual_seed(3)
    h = torch.Generator(device=device_type).manual_seed(3)
    assert torch.equal(torch.randn(4, device=device_type, generator=g).cpu(),
                       torch.randn(4, device=device_type, generator=h).cpu())


def test_fork_rng_restores_device_state(device_type, devmod):
    devmod.manual_seed(5)
    with torch.random.fork_rng(devices=range(devmod.device_count()), device_type=device_type):
        torch.rand(10, device=device_type)
    a = torch.rand(10, device=device_type)
    devmod.manual_seed(5)
    b = torch.rand(10, device=device_type)
    assert torch.equal(a.cpu(), b.cpu())


def test_dropout_reproducible(device_type, devmod):
    x = torch.ones(1000, device=device_type)
    devmod.manual_seed(1)
    a = torch.nn.functional.dropout(x, 0.5)
    devmod.manual_seed(1)
    b = torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(a.cpu(), b.cpu()) and 0 < (a == 0).sum().item() < 1000


def _cpu_draws_bernoulli_with_mkl():
    """Whether the CPU's bernoulli_(p) takes MKL's path (PyTorch with MKL on an Intel CPU), where
    the device's own bernoulli_ kernel leaves the draw to the fallback."""
    if not torch.backends.mkl.is_available():
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.split(":")[-1].strip() == "GenuineIntel"
                       for line in f if line.startswith("vendor_id"))
    except OSError:
        return False


BERNOULLI_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.bool,
                    torch.uint8, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", BERNOULLI_DTYPES, ids=str)
def test_bernoulli_draws_the_cpu_generators_values(device_type, devmod, dtype):
    """bernoulli_(p) on the device gives what the CPU gives with the same seed, and leaves the
    generator where the CPU's leaves it: from a fresh seed and from inside the engine's block of
    624 words, for sizes that end inside a block, on it and across several, for every p from 0
    to 1, and through a generator object of the device."""
    for seed in (0, 12345):
        for before in (0, 5, 311, 623, 1000):
            for n in (1, 7, 312, 313, 624, 5000):
                for p in (0.0, 0.1, 0.5, 1 / 3, 0.9, 1.0):
                    torch.manual_seed(seed)
                    if before:
                        torch.rand(before)
                        torch.rand(before, device=device_type)
                    want = torch.empty(n, dtype=dtype).bernoulli_(p)
                    got = torch.empty(n, dtype=dtype, device=device_type).bernoulli_(p)
                    assert torch.equal(got.cpu(), want), (seed, before, n, p)
                    assert torch.equal(torch.rand(3, device=device_type).cpu(), torch.rand(3))
    gen = torch.Generator(device=device_type).manual_seed(7)
    got = torch.empty(64, 33, dtype=dtype, device=device_type).bernoulli_(0.4, generator=gen)
    cpu_gen = torch.Generator().manual_seed(7)
    want = torch.empty(64, 33, dtype=dtype).bernoulli_(0.4, generator=cpu_gen)
    assert torch.equal(got.cpu(), want)


def test_bernoulli_takes_the_fallback_where_its_kernel_cannot(device_type, host_addressable):
    """The device's bernoulli_ draws contiguous tensors itself (unless the CPU draws with MKL:
    then the fallback runs the CPU's kernel); a non-contiguous one, a CPU generator and p outside
    [0, 1] go to the fallback, which gives the CPU's values and message; empty tensors draw
    nothing."""
    torch_hal._C._reset_fallback_stats()
    torch.empty(100, device=device_type).bernoulli_(0.5)
    stats = torch_hal._C._fallback_stats()
    assert stats["calls"] == (1 if _cpu_draws_bernoulli_with_mkl() else 0)
    # Drawn on the host either way: on a device that stages, the draw's bytes count as staged.
    assert stats["bytes_staged_out"] == (0 if host_addressable else 100 * 4)
    torch.manual_seed(3)
    want = torch.empty(64, 33).t().bernoulli_(0.4)
    want_after = torch.rand(5)
    torch.manual_seed(3)
    torch_hal._C._reset_fallback_stats()
    got = torch.empty(64, 33, device=device_type).t().bernoulli_(0.4)
    assert torch_hal._C._fallback_stats()["calls"] == 1
    assert torch.equal(got.cpu(), want)
    assert torch.equal(torch.rand(5, device=device_type).cpu(), want_after)
    torch_hal._C._reset_fallback_stats()
    cpu_gen = torch.Generator().manual_seed(2)
    got = torch.empty(50, device=device_type).bernoulli_(0.4, generator=cpu_gen)
    assert torch_hal._C._fallback_stats()["calls"] == 1
    want = torch.empty(50).bernoulli_(0.4, generator=torch.Generator().manual_seed(2))
    assert torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match=r"expects p to be in \[0, 1\], but got p=1.5"):
        torch.empty(3, device=device_type).bernoulli_(1.5)
    torch.manual_seed(4)
    empty = torch.empty(0, device=device_type).bernoulli_(0.5)
    after = torch.rand(4, device=device_type).cpu()
    torch.manual_seed(4)
    assert empty.numel() == 0 and torch.equal(after, torch.rand(4))


# ---- Serialization ------------------------------------------------------------------------------

def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def test_save_load_map_location(device_type, devmod):
    dev_tensor = torch.randn(4, 3, device=device_type)
    view = dev_tensor[1:, ::2]
    state = {"w": dev_tensor, "v": view}
    loaded = _roundtrip(state)  # no map_location: back onto the device
    assert loaded["w"].device == dev_tensor.device
    assert loaded["w"].untyped_storage().device == dev_tensor.device
    assert torch.equal(loaded["w"].cpu(), dev_tensor.cpu())
    assert torch.equal(loaded["v"].cpu(), view.cpu())
    assert loaded["v"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()
    on_cpu = _roundtrip(state, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], dev_tensor.cpu())
    cpu_tensor = torch.arange(6.0)
    to_dev = _roundtrip(cpu_tensor, map_location=device_type)
    assert to_dev.device.type == device_type and to_dev.untyped_storage().device.type == device_type
    assert torch.equal(to_dev.cpu(), cpu_tensor)
    if devmod.device_count() > 1:
        moved = _roundtrip(dev_tensor, map_location={f"{device_type}:0": f"{device_type}:1"})
        assert moved.device.index == 1
    model = torch.nn.Linear(3, 2).to(device_type)
    sd = _roundtrip(model.state_dict(), map_location="cpu")
    fresh = torch.nn.Linear(3, 2)
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.weight, model.weight.cpu())


# ---- AMP ------------------------------------------------------------------------------------------

def test_autocast_dtypes(device_type, devmod):
    assert torch.get_autocast_dtype(device_type) == torch.bfloat16
    a = torch.randn(8, 8, device=device_type)
    with torch.autocast(device_type):
        assert torch.is_autocast_enabled(device_type)
        mm = a @ a
        lin = torch.nn.functional.linear(a, a)
        soft = torch.softmax(a, dim=0)
        s = a.sum()
    assert mm.dtype == torch.bfloat16 and lin.dtype == torch.bfloat16
    assert soft.dtype == torch.float32 and s.dtype == torch.float32
    with devmod.amp.autocast():
        assert (a @ a).dtype == torch.bfloat16
    with torch.autocast(device_type, dtype=torch.float16):
        assert (a @ a).dtype == torch.float16


@pytest.mark.parametrize("autocast_dtype", [torch.bfloat16, torch.float16],
                         ids=["bfloat16", "float16"])
def test_autocast_promote_widens_mixed_precision(device_type, autocast_dtype):
    """The "promote" operators (dot, addcmul, scatter_add, index_put, ...) run in the widest type
    among the autocast type and their inputs: a lower-precision input other than the autocast
    type widens to float32 (PyTorch's own policy raised "Unexpected floating ScalarType");
    double inputs run as they are; bool/integer ones are not touched."""
    other = torch.float16 if autocast_dtype == torch.bfloat16 else torch.bfloat16

    def t(*shape, dtype):
        return torch.randn(*shape, device=device_type).to(dtype)

    with torch.autocast(device_type, dtype=autocast_dtype):
        assert torch.dot(t(4, dtype=other), t(4, dtype=other)).dtype == torch.float32
        assert torch.dot(t(4, dtype=autocast_dtype), t(4, dtype=autocast_dtype)).dtype == \
            autocast_dtype
        assert torch.dot(t(4, dtype=autocast_dtype), t(4, dtype=torch.float32)).dtype == \
            torch.float32
        assert torch.addcmul(t(3, dtype=autocast_dtype), t(3, dtype=other),
                             t(3, dtype=autocast_dtype)).dtype == torch.float32
        index = torch.tensor([0, 2], device=device_type)
        out = t(3, 2, dtype=autocast_dtype).scatter_add(0, index.view(2, 1).expand(2, 2),
                                                       t(2, 2, dtype=other))
        assert out.dtype == torch.float32
        out = t(3, dtype=other).index_put((index,), t(2, dtype=autocast_dtype))
        assert out.dtype == torch.float32
        doubles = torch.dot(t(4, dtype=torch.float64), t(4, dtype=torch.float64))
        assert doubles.dtype == torch.float64
    # The values are the operator's on the widened inputs.
    x, y = t(5, dtype=other), t(5, dtype=other)
    with torch.autocast(device_type, dtype=autocast_dtype):
        got = torch.dot(x, y)
    assert torch.equal(got.cpu(), torch.dot(x.float(), y.float()).cpu())


def test_grad_scaler(device_type):
    # torch.amp.GradScaler() without a device still means "cuda" in torch 2.13: pass it.
    model = torch.nn.Linear(4, 4).to(device_type)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device_type, init_scale=1024.0)
    with torch.autocast(device_type):
        loss = model(torch.randn(8, 4, device=device_type)).float().pow(2).mean()
    before = model.weight.detach().clone()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1024.0
    assert not torch.equal(before.cpu(), model.weight.detach().cpu())
    # an inf gradient makes the scaler skip the step and back off
    model.weight.grad = torch.full_like(model.weight, float("inf"))
    before = model.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 512.0
    assert torch.equal(before.cpu(), model.weight.detach().cpu())


# ---- Custom operators ---------------------------------------------------------------------------

@torch.library.custom_op("torch_hal_test::scaled_sin", mutates_args=(), device_types="cpu")
def scaled_sin(x: torch.Tensor, scale: float) -> torch.Tensor:
    assert x.device.type == "cpu"  # only a CPU kernel exists
    return torch.sin(x) * scale


@torch.library.custom_op("torch_hal_test::add_into", mutates_args=("out",), device_types="cpu")
def add_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.add_(x)


# The old-style registration: a schema and a CPU kernel only.
_LIB = torch.library.Library("torch_hal_test", "FRAGMENT")
_LIB.define("twice(Tensor x) -> Tensor")
_LIB.impl("twice", lambda x: x * 2, "CPU")


def test_custom_op_with_cpu_kernel_only(device_type):
    x = torch.randn(16, device=device_type)
    y = scaled_sin(x, 3.0)
    assert y.device == x.device
    torch.testing.assert_close(y.cpu(), torch.sin(x.cpu()) * 3.0)
    out = torch.ones(16, device=device_type)
    add_into(x, out)
    torch.testing.assert_close(out.cpu(), x.cpu() + 1)
    twice = torch.ops.torch_hal_test.twice(x)
    assert twice.device == x.device and torch.equal(twice.cpu(), x.cpu() * 2)


# ---- In-place, out= and views through the fallback -----------------------------------------------

def test_fallback_semantics(device_type, devmod):
    base = torch.arange(12.0, device=device_type).reshape(3, 4)
    view = base[:, 1]
    view.mul_(10)  # in place on a view: the base sees it
    assert base[:, 1].cpu().tolist() == [10.0, 50.0, 90.0]
    out = torch.empty(0, device=device_type)
    torch.add(base, 1, out=out)  # out= with resize
    assert out.shape == (3, 4) and torch.equal(out.cpu(), base.cpu() + 1)
    diag = torch.diagonal(base)  # view op: aliases the base
    assert diag.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    parts = torch.unbind(base)
    parts[0].zero_()
    assert base[0].abs().sum().item() == 0
    vals, idx = base.max(dim=1)
    assert vals.device.type == device_type and idx.dtype == torch.int64
    assert torch.equal(vals.cpu(), base.cpu().max(dim=1).values)


def test_fallback_is_zero_copy_on_host_addressable_devices(device_type, host_addressable):
    if not host_addressable:
        pytest.skip("the device is not host-addressable: the fallback stages through the host")
    a = torch.randn(1000, device=device_type)
    torch_hal._C._reset_fallback_stats()
    b = torch.sin(a)
    c = a.view(10, 100).t()
    c.add_(1)
    stats = torch_hal._C._fallback_stats()
    assert stats["bytes_staged_in"] == 0 and stats["bytes_staged_out"] == 0
    assert stats["outputs_copied"] == 0 and stats["outputs_adopted"] >= 1
    assert b.device.type == device_type


def test_a_foreach_operator_is_one_fallback_call(device_type):
    """ATen's _foreach_* operators have no CPU kernel, only a composite that runs one operator
    per list element, which made a fallback call per element. The device runs each as one
    call: the lists' elements are staged or aliased together and the CPU runs the same
    composite, so the results are the CPU's, bit for bit. Lists of 40 (past the fallback's
    small containers), whose elements share storages, cover in-place, functional, scalar-list
    and reduction overloads."""
    torch.manual_seed(0)
    base = torch.randn(20, 8)
    xs = [torch.randn(8) for _ in range(20)] + list(base.unbind())  # 20 share one storage
    ys = [torch.randn(8) for _ in range(40)]
    zs = [torch.rand(8) + 1 for _ in range(40)]
    scalars = [0.1 * i for i in range(40)]
    dbase = base.to(device_type)
    dxs = [x.to(device_type) for x in xs[:20]] + list(dbase.unbind())
    dys = [y.to(device_type) for y in ys]
    dzs = [z.to(device_type) for z in zs]

    def check(got, want):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.device.type == device_type and torch.equal(g.cpu(), w)

    torch_hal._C._reset_fallback_stats()
    torch._foreach_addcdiv_(dxs, dys, dzs, scalars)
    assert torch_hal._C._fallback_stats()["calls"] == 1
    torch._foreach_addcdiv_(xs, ys, zs, scalars)
    check(dxs, xs)
    assert torch.equal(dbase.cpu(), base)  # written through the views
    torch._foreach_lerp_(dxs, dys, 0.25)
    torch._foreach_lerp_(xs, ys, 0.25)
    check(dxs, xs)
    check(torch._foreach_sqrt(dzs), torch._foreach_sqrt(zs))
    check(torch._foreach_add(dxs, dys, alpha=2), torch._foreach_add(xs, ys, alpha=2))
    check(torch._foreach_norm(dxs), torch._foreach_norm(xs))
    check(torch._foreach_mul(dxs, torch.tensor(3.0, device=device_type)),
          torch._foreach_mul(xs, torch.tensor(3.0)))
    torch._foreach_zero_(dys)
    check(dys, [torch.zeros(8)] * 40)


def test_a_foreach_operator_across_two_devices(device_type, devmod):
    """Lists whose elements are on two devices (a fallback call is on one) keep the composite:
    one operator per element, each on its own device."""
    if devmod.device_count() < 2:
        pytest.skip("needs two devices")
    xs = [torch.randn(4) for _ in range(4)]
    ys = [torch.randn(4) for _ in range(4)]
    devices = [torch.device(device_type, i % 2) for i in range(4)]
    dxs = [x.to(d) for x, d in zip(xs, devices)]
    dys = [y.to(d) for y, d in zip(ys, devices)]
    torch._foreach_add_(dxs, dys)
    torch._foreach_add_(xs, ys)
    for got, want, d in zip(dxs, xs, devices):
        assert got.device == d and torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="same device"):
        torch._foreach_add_([dxs[0]], [dys[1]])


def test_fallback_stand_ins_reused_across_calls_keep_each_calls_data(device_type):
    """On a host-addressable device a thread reuses the CPU tensors standing in for operator
    arguments from call to call; what a kernel keeps (a view it returns, a storage it resized
    for out=) is not reused. Whatever the device, a run of operators of different dtypes,
    shapes, views and out= resizes gives the CPU's results and leaves its inputs alone."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.int32, torch.bfloat16):
        a = (torch.randn(5, 7) * 10).to(dtype)
        b = (torch.randn(7) * 10).to(dtype)
        da, db = a.to(device_type), b.to(device_type)
        assert torch.equal((da + db).cpu(), a + b)
        assert torch.equal((da * db).cpu(), a * b)
        pieces = torch.split(da.t(), 2)  # views of one argument's storage
        assert all(torch.equal(p.cpu(), q) for p, q in zip(pieces, torch.split(a.t(), 2)))
        out = torch.empty(0, device=device_type, dtype=dtype)
        torch.add(da, db, out=out)  # out= resizes the argument's storage
        assert torch.equal(out.cpu(), a + b)
        window = da[1:3]
        window.mul_(2)  # in place on part of a storage
        a[1:3].mul_(2)
        assert torch.equal(da.cpu(), a) and torch.equal(db.cpu(), b)
        assert torch.equal(pieces[0].cpu(), a.t()[:2])


def test_random_fills_of_whole_storages_are_not_staged_in(device_type, host_addressable):
    """A random fill (exponential_, uniform_, ...) writes every element of self: on a device
    that stages, a tensor that is its storage's whole is not copied to the host first. A view
    of part of a storage still is, and the rest of the storage keeps its values. (bernoulli_
    with a constant p has a kernel of its own, tested above.)"""
    if host_addressable:
        pytest.skip("the device is host-addressable: the fallback stages nothing")
    torch.manual_seed(0)
    mask = torch.empty(4096, device=device_type)
    torch_hal._C._reset_fallback_stats()
    mask.exponential_()
    mask.uniform_()
    stats = torch_hal._C._fallback_stats()
    assert stats["bytes_staged_in"] == 0
    assert stats["bytes_staged_out"] == 2 * 4096 * 4
    # Values as the CPU generator's own draws (the device generator is seeded alike).
    torch.manual_seed(0)
    want = torch.empty(4096).exponential_()
    want.uniform_()
    assert torch.equal(mask.cpu(), want)
    base = torch.zeros(10, device=device_type)
    torch_hal._C._reset_fallback_stats()
    base[2:5].uniform_(1, 2)
    assert torch_hal._C._fallback_stats()["bytes_staged_in"] == 10 * 4
    got = base.cpu()
    assert got[:2].eq(0).all() and got[5:].eq(0).all() and got[2:5].ge(1).all()


# What the traced children below share: a device tensor `base` ready on the device, then the
# trace's marker (traced_child records the calls from there on).
TRACED_PREAMBLE = textwrap.dedent("""
    import torch, torch_hal
    device = torch.device(torch_hal.device_type(), 0)
    module = torch.get_device_module(device)
    base = torch.arange(4096.0, device=device)
    module.synchronize()
    marker = torch.empty(40 << 20, dtype=torch.uint8, device=device)  # a segment of its own
""")

STAGED_CHILD = TRACED_PREAMBLE + textwrap.dedent("""
    torch.manual_seed(0)
    draws = [torch.empty(4096, device=device).bernoulli_(0.5) for _ in range(4)]
    sums = [base + i for i in range(4)]
    module.synchronize()
    torch.manual_seed(0)
    for i in range(4):
        assert torch.equal(draws[i].cpu(), torch.empty(4096).bernoulli_(0.5))
        assert torch.equal(sums[i].cpu(), torch.arange(4096.0) + i)
    print("OK")
""")


@pytest.mark.own_backend_trainium
def test_staged_operators_return_without_waiting_for_their_copies(traced_child):
    """On a device that stages (the Trainium backend), a fallback operator queues the copies
    of its results to the device and returns: a draw into a fresh tensor (nothing staged in)
    waits for nothing, an addition waits only for its input's copy to the host. The host
    buffers the queued copies read stay alive until they ran: the values are right."""
    calls = traced_child(STAGED_CHILD)
    assert calls.count("memcpy_async") == 4 + 4 * 2, calls  # draws: out; sums: in and out
    assert calls.count("stream_synchronize") == 4, calls  # each sum's input, once


FILL_CHILD = TRACED_PREAMBLE + textwrap.dedent("""
    filled = [torch.ones(4096, device=device), torch.full((4096,), 2.5, device=device),
              torch.ones_like(base), torch.empty(64, dtype=torch.int32, device=device).fill_(7)]
    module.synchronize()
    assert torch.equal(filled[0].cpu(), torch.ones(4096))
    assert torch.equal(filled[1].cpu(), torch.full((4096,), 2.5))
    assert torch.equal(filled[2].cpu(), torch.ones(4096))
    assert torch.equal(filled[3].cpu(), torch.full((64,), 7, dtype=torch.int32))
    print("OK")
""")


@pytest.mark.own_backend_trainium
def test_a_fill_is_queued_without_waiting(traced_child):
    """On a device that stages, fill_ (torch.ones, full, ones_like: autograd's first gradient)
    fills pinned host memory and queues its copy, as a fill kernel would be queued: it does not
    wait for the work before it (a compiled forward's program), and the values arrive."""
    calls = traced_child(FILL_CHILD)
    assert calls.count("memcpy_async") == 4, calls
    assert "stream_synchronize" not in calls, calls


def test_buffers_of_many_queued_copies_stay_alive_until_copied(device_type):
    """More staged operators in a row than the fallback holds buffers for (it then waits for
    the oldest): every result is its own."""
    base = torch.arange(1000.0, device=device_type)
    sums = [base + i for i in range(600)]
    want = torch.arange(1000.0)
    for i, s in enumerate(sums):
        assert torch.equal(s.cpu(), want + i), i


STREAM_FAILURE_CHILD = textwrap.dedent("""
    import torch, torch_hal
    device = torch.device(torch_hal.device_type(), 0)
    module = torch.get_device_module(device)
    x = torch.empty(4096, device=device).bernoulli_(0.5)  # its copy to the device fails
    print("RETURNED")
    try:
        module.synchronize()
    except RuntimeError as e:
        print("SYNCHRONIZE", e)
""")


@pytest.mark.own_backend_trainium
def test_a_failed_copy_of_a_staged_operator_is_reported_at_the_next_synchronization(tmp_path):
    """The copy of a fallback operator's result to the device fails on the stream (the faults
    layer's stream_fail): the operator has returned already, and the next synchronisation
    reports the failure, naming the backend, as CUDA reports a failed asynchronous copy."""
    env = dict(os.environ, TORCH_HAL_BACKEND="trainium", HAL_LAYERS="faults",
               HAL_FAULTS="stream_fail:count=1", NEURON_EMU_LOCK_DIR=str(tmp_path / "emu"))
    r = subprocess.run([sys.executable, "-c", STREAM_FAILURE_CHILD], env=env,
                       capture_output=True, text=True, timeout=600)
    out = r.stdout.splitlines()
    assert out[:1] == ["RETURNED"], r.stdout[-2000:] + r.stderr[-3000:]
    assert len(out) == 2 and out[1].startswith("SYNCHRONIZE"), out
    assert "injected stream failure" in out[1] and "trainium" in out[1], out


# ---- Where the CPU's paths are taken: dropout, the backward's thread, copies ------------------

def test_dropout_takes_the_cpu_path_on_host_addressable_devices(device_type, host_addressable):
    """aten::dropout sends every PrivateUse1 tensor to the fused native_dropout. On a
    host-addressable device the bridge takes the CPU's composite path (a mask drawn and scaled,
    one multiply each way: two copies and a multiply fewer); a device that stages keeps the
    fused operator. Both give the CPU's values."""
    x = torch.randn(64, 32)
    runs = {}
    for dev in ("cpu", device_type):
        xd = x.to(dev, copy=True).requires_grad_()
        torch.manual_seed(3)
        y = torch.nn.functional.dropout(xd, 0.25)
        y.backward(torch.full_like(y, 2.0))
        runs[dev] = (y.detach().cpu(), xd.grad.cpu(), type(y.grad_fn).__name__)
    assert torch.equal(runs["cpu"][0], runs[device_type][0])
    assert torch.equal(runs["cpu"][1], runs[device_type][1])
    assert runs["cpu"][2] == "MulBackward0"
    assert runs[device_type][2] == ("MulBackward0" if host_addressable
                                    else "NativeDropoutBackward0")
    # Not training, or p=0: the input itself, as on the CPU.
    xd = x.to(device_type)
    assert torch.nn.functional.dropout(xd, 0.0) is xd
    assert torch.nn.functional.dropout(xd, 0.5, training=False) is xd
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1"):
        torch.dropout(xd, 1.5, True)


def test_dropout_traces_as_on_the_cpu(device_type):
    """What torch.compile traces is the decomposition the CPU's trace has (native_dropout),
    whatever path eager takes."""
    from torch._dynamo.backends.common import aot_autograd

    def traced_ops(device):
        graphs = []

        def record(gm, _inputs):
            graphs.append(sorted(str(n.target) for n in gm.graph.nodes
                                 if n.op == "call_function"))
            return gm

        torch._dynamo.reset()
        fn = torch.compile(lambda t: torch.nn.functional.dropout(t * 2, 0.5),
                           backend=aot_autograd(fw_compiler=record))
        fn(torch.randn(8, 8, device=device, requires_grad=True))
        return graphs[0]

    assert traced_ops(device_type) == traced_ops("cpu")
    assert "aten.native_dropout.default" in traced_ops(device_type)


def test_backward_runs_on_the_calling_thread_on_host_addressable_devices(device_type,
                                                                        host_addressable):
    """Autograd hands each backward() of a non-CPU device to a worker thread of the device
    (two thread wake-ups, and the GIL handed over for every Python hook). A host-addressable
    device's kernels are the CPU's, and its backward runs on the calling thread as the CPU's
    does; torch.autograd.set_multithreading_enabled(True) brings the worker back. A device
    that stages keeps autograd's worker."""
    import threading

    def backward_thread(multithreading=None):
        x = torch.ones(4, device=device_type, requires_grad=True)
        seen = []
        x.register_hook(lambda grad: seen.append(threading.get_ident()))
        y = (x * 2).sum()
        if multithreading is None:
            y.backward()
        else:
            with torch.autograd.set_multithreading_enabled(multithreading):
                y.backward()
        return seen[0]

    caller = threading.get_ident()
    assert (backward_thread() == caller) == host_addressable
    assert backward_thread(multithreading=True) != caller
    assert (backward_thread() == caller) == host_addressable  # the setting was restored
    on_own_thread = []
    other = threading.Thread(
        target=lambda: on_own_thread.append(backward_thread() == threading.get_ident()))
    other.start()
    other.join()
    assert on_own_thread == [host_addressable]


def test_autograd_device_threads_are_named_when_the_first_backward_returns(device_type,
                                                                           tmp_path):
    """Autograd starts its device threads ("pt_autograd_<i>") in the first backward() and does
    not wait for them to name themselves; a backward on the calling thread could return first
    (OpenReg's test_autograd_init looks for them then). Fresh processes, each on a machine kept
    busy meanwhile, read the names as soon as their first backward returns."""
    code = textwrap.dedent(f"""
        import os, torch, torch_hal
        torch.ones(2, requires_grad=True, device="{device_type}").sum().backward()
        names = set()
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{{tid}}/comm") as comm:
                names.add(comm.read().strip())
        missing = [i for i in range(torch.accelerator.device_count())
                   if f"pt_autograd_{{i}}" not in names]
        assert not missing, (missing, sorted(names))
    """)
    # An emulated machine of its own for the children (this process holds the emulator's
    # cores), whose lock files go with tmp_path.
    env = dict(os.environ, NEURON_EMU_LOCK_DIR=str(tmp_path))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * (os.cpu_count() or 1))]
    try:
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_at_exit_device_threads_have_released_every_backward(device_type):
    """Autograd's device thread releases a backward's task after backward() has returned, and
    the task holds the Python context torch stashes for every backward. Released during
    interpreter shutdown, that aborts the process, so torch_hal's exit handler returns only
    once the device threads have released every backward before it: the context (and what it
    holds) is gone by then."""
    import contextvars
    import weakref

    class Marker:
        pass

    var = contextvars.ContextVar("marker")
    marker = Marker()
    released = weakref.ref(marker)
    token = var.set(marker)
    with torch.autograd.set_multithreading_enabled(True):  # on the device's thread
        torch.ones(2, requires_grad=True, device=device_type).sum().backward()
    var.reset(token)
    del marker
    torch_hal._C._release_finished_backwards()
    assert released() is None


def test_a_process_ending_right_after_its_first_backward_exits_cleanly(device_type, tmp_path):
    """The race above, as a user meets it: a script that ends right after its first backward.
    Without the exit handler, a few in a hundred such processes aborted on the emulated
    NeuronCores ("terminate called without an active exception")."""
    code = (f"import torch\n"
            f"torch.ones(2, requires_grad=True, device='{device_type}').sum().backward()\n")
    env = dict(os.environ, NEURON_EMU_LOCK_DIR=str(tmp_path))
    for _ in range(10):
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr


def test_a_device_copy_is_one_operator(device_type):
    """PyTorch's copy_ sends every copy involving a PrivateUse1 tensor to _copy_from, a second
    operator through the dispatcher; the device's own copy_ does the copy itself."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(8, device=device_type)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        half = x.to(torch.bfloat16)
        back = x.cpu()
        moved = torch.ones(8).to(device_type)
    names = [event.name for event in prof.events()]
    assert names.count("aten::copy_") == 3
    assert "aten::_copy_from" not in names
    assert torch.equal(half.cpu(), back.to(torch.bfloat16))
    assert torch.equal(moved.cpu(), torch.ones(8))


# ---- Training ---------------------------------------------------------------------------------

def _train(device, steps=5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 16, generator=gen).to(device)
    y = torch.randn(64, 4, generator=gen).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_training_step_matches_cpu(device_type, backend):
    cpu_losses, cpu_params = _train("cpu")
    dev_losses, dev_params = _train(device_type)
    assert dev_losses[-1] < dev_losses[0]
    if backend == "cpu":  # the same CPU kernels on the same bits: exactly equal
        assert dev_losses == cpu_losses
        for a, b in zip(dev_params, cpu_params):
            assert torch.equal(a, b)
    else:
        torch.testing.assert_close(dev_losses, cpu_losses)
        for a, b in zip(dev_params, cpu_params):
            torch.testing.assert_close(a, b)


def test_checkpoint_replays_device_rng(device_type, devmod):
    # torch.utils.checkpoint stashes and restores the device RNG (through torch.<device>) so
    # that dropout recomputed in backward draws the same mask.
    layer = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Dropout(0.5)).to(device_type)
    for reentrant in (True, False):
        x = torch.randn(8, 32, device=device_type, requires_grad=True)
        devmod.manual_seed(11)
        plain = layer(x).sum()
        plain.backward()
        g_plain, x.grad = x.grad, None
        devmod.manual_seed(11)
        ckpt = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=reentrant).sum()
        ckpt.backward()
        assert torch.equal(plain.detach().cpu(), ckpt.detach().cpu())
        assert torch.equal(g_plain.cpu(), x.grad.cpu())


def test_torch_accelerator_api(device_type, devmod):
    acc = torch.accelerator
    assert acc.is_available() and acc.current_accelerator().type == device_type
    assert acc.device_count() == devmod.device_count()
    acc.set_device_index(0)
    assert acc.current_device_index() == 0
    s = devmod.Stream()
    acc.set_stream(s)
    assert acc.current_stream().stream_id == s.stream_id
    acc.set_stream(devmod.default_stream())
    t = torch.empty(1 << 20, device=device_type)
    acc.synchronize()
    assert acc.memory_allocated() >= (1 << 20) * 4
    assert acc.max_memory_allocated() >= acc.memory_allocated()
    assert acc.memory_reserved() >= acc.memory_allocated()
    assert acc.memory_stats()["allocation.all.current"] >= 1
    del t
    acc.empty_cache()
    acc.empty_host_cache()
    free, total = acc.get_memory_info()
    assert 0 < free <= total
    with acc.device_index(devmod.device_count() - 1):
        assert devmod.current_device() == devmod.device_count() - 1
