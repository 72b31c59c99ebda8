"""One rank of the multi-process tests in test_distributed.py (not a test module itself).

    python dist_worker.py <scenario>      # with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT

Each scenario asserts what it checks and prints "OK <check>" lines; a failed check raises, so
the process exits non-zero with the traceback on stderr.
"""

import copy
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import torch_hal

DEV = torch_hal.device_type()
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", RANK))


def ok(name):
    print(f"OK {name}", flush=True)
    if os.environ.get("TEST_OK_DIR"):  # ranks under torchrun share stdout: one file per rank
        with open(os.path.join(os.environ["TEST_OK_DIR"], f"rank{RANK}.txt"), "a") as f:
            f.write(f"OK {name}\n")


def setup(timeout_s=60, device_id=False):
    """Joins the default group without naming a backend: torch picks the accelerator's default.

    device_id=True passes the rank's device (what DDP needs in torch 2.13: after a bare
    init_process_group() the group's default backend type is left at GLOO, which a group
    without gloo does not have, and DDP's constructor asks for it)."""
    index = LOCAL_RANK % torch.accelerator.device_count()
    torch.accelerator.set_device_index(index)
    device = torch.device(DEV, index)
    timeout = datetime.timedelta(seconds=timeout_s)
    if device_id:
        dist.init_process_group(timeout=timeout, device_id=device)
    else:
        dist.init_process_group(timeout=timeout)
    backend = dist.group.WORLD._get_backend(device)
    assert isinstance(backend, torch_hal._C.ProcessGroupHAL), type(backend)
    assert dist.get_default_backend_for_device(DEV) == "torch_hal"
    ok("default_backend")
    return device


def close():
    dist.destroy_process_group()


def full(value, n=5, dtype=torch.float32, device=None):
    return torch.full((n,), value, dtype=dtype, device=device)


# ---- Scenarios -----------------------------------------------------------------------------------

def collectives():
    device = setup()
    r, w = RANK, WORLD
    ranks = torch.arange(1, w + 1, dtype=torch.float64)

    # allreduce: every op, several dtypes
    expected = {dist.ReduceOp.SUM: ranks.sum(), dist.ReduceOp.PRODUCT: ranks.prod(),
                dist.ReduceOp.MIN: ranks.min(), dist.ReduceOp.MAX: ranks.max(),
                dist.ReduceOp.AVG: ranks.mean()}
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
                  torch.int32, torch.uint8, torch.int8):
        for op, value in expected.items():
            if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                continue
            t = full(r + 1, 7, dtype, device)
            dist.all_reduce(t, op=op)
            assert torch.equal(t.cpu(), full(value.item(), 7, dtype)), (dtype, op, t)
    ok("all_reduce_ops_dtypes")
    flag = torch.tensor([r == 0, False, True], device=device)
    dist.all_reduce(flag)  # bool SUM: logical or
    assert flag.cpu().tolist() == [True, False, True]
    flag = torch.tensor([r == 0, True], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.PRODUCT)  # logical and
    assert flag.cpu().tolist() == [w == 1, True]
    c = torch.full((3,), complex(r + 1, -(r + 1)), dtype=torch.complex64, device=device)
    dist.all_reduce(c)
    assert torch.equal(c.cpu(), torch.full((3,), complex(ranks.sum(), -ranks.sum()),
                                          dtype=torch.complex64))
    big = torch.arange(1 << 18, dtype=torch.float32, device=device) * (r + 1)
    dist.all_reduce(big)
    assert torch.equal(big.cpu(), torch.arange(1 << 18, dtype=torch.float32) * ranks.sum().item())
    ok("all_reduce_bool_complex_large")
    empty = torch.empty(0, device=device)
    dist.all_reduce(empty)
    ok("all_reduce_empty")

    # unsupported ops say so
    t = full(1.0, device=device)
    try:
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
        raise AssertionError("PREMUL_SUM did not raise")
    except (NotImplementedError, RuntimeError) as e:
        assert "PREMUL_SUM is not supported" in str(e), e
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32, device=device), op=dist.ReduceOp.BAND)
        raise AssertionError("BAND did not raise")
    except (NotImplementedError, RuntimeError) as e:
        assert "bitwise" in str(e), e
    ok("unsupported_ops_raise")

    # broadcast from every root
    for root in range(w):
        t = torch.arange(6, device=device) * (r + 1)
        dist.broadcast(t, src=root)
        assert torch.equal(t.cpu(), torch.arange(6) * (root + 1))
    ok("broadcast")

    # reduce to every root
    for root in range(w):
        t = full(r + 1, 4, device=device)
        dist.reduce(t, dst=root)
        if r == root:
            assert torch.equal(t.cpu(), full(ranks.sum().item(), 4))
    ok("reduce")

    # all_gather (list and into one tensor)
    outs = [torch.empty(2, 3, device=device) for _ in range(w)]
    dist.all_gather(outs, torch.full((2, 3), float(r), device=device))
    for i, o in enumerate(outs):
        assert torch.equal(o.cpu(), torch.full((2, 3), float(i)))
    out = torch.empty(w * 4, dtype=torch.int64, device=device)
    dist.all_gather_into_tensor(out, torch.arange(4, device=device) + 10 * r)
    assert torch.equal(out.cpu(), torch.cat([torch.arange(4) + 10 * i for i in range(w)]))
    ok("all_gather")

    # reduce_scatter (list and from one tensor)
    out = torch.empty(3, device=device)
    dist.reduce_scatter(out, [torch.full((3,), float(i + r), device=device) for i in range(w)])
    assert torch.equal(out.cpu(), torch.full((3,), float(sum(r_ + RANK for r_ in range(w)))))
    out = torch.empty(2, device=device)
    inp = torch.arange(2 * w, dtype=torch.float32, device=device) * (r + 1)
    dist.reduce_scatter_tensor(out, inp)
    assert torch.equal(out.cpu(), torch.arange(2 * r, 2 * r + 2, dtype=torch.float32)
                       * ranks.sum().float())
    ok("reduce_scatter")

    # all_to_all: equal splits, unequal splits, lists
    out = torch.empty(2 * w, device=device)
    dist.all_to_all_single(out, torch.arange(2 * w, dtype=torch.float32, device=device) + 100 * r)
    want = torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * i
                      for i in range(w)])
    assert torch.equal(out.cpu(), want)
    # rank r sends (p + 1) rows to peer p; so it receives (r + 1) rows from everyone
    in_splits = [p + 1 for p in range(w)]
    out_splits = [r + 1] * w
    inp = torch.cat([torch.full((p + 1, 2), float(10 * r + p)) for p in range(w)]).to(device)
    out = torch.empty(sum(out_splits), 2, device=device)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((r + 1, 2), float(10 * p + r)) for p in range(w)])
    assert torch.equal(out.cpu(), want)
    outs = [torch.empty(3, device=device) for _ in range(w)]
    dist.all_to_all(outs, [torch.full((3,), float(10 * r + p), device=device) for p in range(w)])
    for p, o in enumerate(outs):
        assert torch.equal(o.cpu(), torch.full((3,), float(10 * p + r)))
    ok("all_to_all")

    # gather / scatter
    gathered = [torch.empty(2, device=device) for _ in range(w)] if r == 0 else None
    dist.gather(torch.full((2,), float(r), device=device), gathered, dst=0)
    if r == 0:
        assert [g.cpu().tolist() for g in gathered] == [[float(i)] * 2 for i in range(w)]
    out = torch.empty(2, device=device)
    pieces = [torch.full((2,), float(i * i), device=device) for i in range(w)] if r == 0 else None
    dist.scatter(out, pieces, src=0)
    assert out.cpu().tolist() == [float(r * r)] * 2
    ok("gather_scatter")

    # point to point: a ring with batch_isend_irecv (coalesced), then plain send/recv
    nxt, prv = (r + 1) % w, (r - 1) % w
    recv = torch.empty(4, device=device)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, full(r, 4, device=device), nxt),
                                   dist.P2POp(dist.irecv, recv, prv)])
    for q in reqs:
        q.wait()
    assert torch.equal(recv.cpu(), full(prv, 4))
    if w > 1:
        if r == 0:
            dist.send(torch.arange(5, device=device), dst=1)
        elif r == 1:
            t = torch.empty(5, dtype=torch.int64, device=device)
            dist.recv(t, src=0)
            assert t.cpu().tolist() == list(range(5))
    ok("send_recv")

    # coalesced forms
    ts = [full(r + 1, n, device=device) for n in (1, 3, 1000)]
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for t in ts:
        assert torch.equal(t.cpu(), full(ranks.sum().item(), t.numel()))
    ts = [full(r + 1, 4, device=device), full(2 * (r + 1), 2, device=device)]
    dist.all_reduce_coalesced(ts)
    assert torch.equal(ts[0].cpu(), full(ranks.sum().item(), 4))
    assert torch.equal(ts[1].cpu(), full(2 * ranks.sum().item(), 2))
    ok("coalesced")

    # async work: wait, is_completed, futures, then-callbacks
    t = full(r + 1, 1 << 16, device=device)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    work.wait()
    assert work.is_completed() and work.is_success()
    assert torch.equal(fut.wait()[0].cpu(), full(ranks.sum().item(), 1 << 16))
    assert torch.equal(doubled.wait().cpu(), full(2 * ranks.sum().item(), 1 << 16))
    ok("async_work_future")

    # stream semantics: the collective waits for work queued on a side stream
    side = torch.Stream(device=device)
    with torch.accelerator.stream(side) if hasattr(torch.accelerator, "stream") else \
            getattr(torch, DEV).stream(side):
        t = torch.ones(1 << 16, device=device) * (r + 1)
        dist.all_reduce(t)
        u = t * 1  # ordered after the collective on the same (side) stream
    side.synchronize()
    assert torch.equal(u.cpu(), torch.full((1 << 16,), ranks.sum().item()))
    ok("streams")

    # barrier and object collectives (these run on the device with the default group)
    dist.barrier()
    objs = [None] * w
    dist.all_gather_object(objs, {"rank": r, "pid": os.getpid()})
    assert [o["rank"] for o in objs] == list(range(w))
    lst = [{"from": "rank0"}] if r == 0 else [None]
    dist.broadcast_object_list(lst, src=0)
    assert lst[0] == {"from": "rank0"}
    ok("barrier_objects")

    # wrong device / dtype errors are clear
    try:
        dist.all_reduce(torch.ones(2))
        raise AssertionError("a CPU tensor was accepted by the device-only group")
    except (RuntimeError, ValueError) as e:
        assert "cpu" in str(e).lower(), e
    ok("cpu_tensor_rejected")
    close()


def ddp():
    """DDP over torch_hal against DDP over gloo on the CPU, in the same processes."""
    device = setup(device_id=True)
    # A CPU group for the reference DDP. (In torch 2.13 new_group(backend="gloo") fails when
    # the default group is bound to a device gloo does not know: it asks the new group for a
    # backend of that device.)
    gloo = dist.new_group(backend=f"cpu:gloo,{DEV}:torch_hal")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(16, 32)
            self.b = nn.Linear(32, 4)

        def forward(self, x):
            return self.b(F.relu(self.a(x)))

    torch.manual_seed(0)
    ref = Net()
    dev_model = copy.deepcopy(ref).to(device)
    cpu_ddp = nn.parallel.DistributedDataParallel(ref, process_group=gloo)
    dev_ddp = nn.parallel.DistributedDataParallel(dev_model, device_ids=[device.index],
                                                  bucket_cap_mb=0.001)  # several buckets
    cpu_opt = torch.optim.SGD(cpu_ddp.parameters(), lr=0.1, momentum=0.9)
    dev_opt = torch.optim.SGD(dev_ddp.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + RANK)  # each rank its own data
    for _ in range(4):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        for model, opt, d in ((cpu_ddp, cpu_opt, torch.device("cpu")),
                              (dev_ddp, dev_opt, device)):
            opt.zero_grad()
            F.mse_loss(model(x.to(d)), y.to(d)).backward()
            opt.step()
    for (n, p), q in zip(ref.named_parameters(), dev_model.parameters()):
        assert torch.equal(p.detach(), q.detach().cpu()), n
    # the ranks agree
    flat = torch.cat([q.detach().flatten() for q in dev_model.parameters()])
    other = flat.clone()
    dist.broadcast(other, src=0)
    assert torch.equal(flat.cpu(), other.cpu())
    ok("ddp_matches_cpu")
    close()


def dead_peer():
    """Rank 1 is SIGKILLed after the first collective; rank 0 must get an error, not hang."""
    timeout = float(os.environ.get("TEST_TIMEOUT_S", "5"))
    device = setup(timeout_s=timeout)
    t = torch.ones(4, device=device)
    dist.all_reduce(t)
    if RANK == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        raise AssertionError("the collective with a dead peer succeeded")
    except dist.DistBackendError as e:
        elapsed = time.monotonic() - start
        print(f"ERROR after {elapsed:.2f}s: {e}", flush=True)
        assert "HAL_ERROR_" in str(e), e
        # No bound on the time here: a hang is what the test's launch timeout catches.
    # the communicator stays failed: later collectives fail at once
    try:
        dist.all_reduce(t)
        raise AssertionError("a collective on the failed communicator succeeded")
    except dist.DistBackendError as e:
        assert "HAL_ERROR_" in str(e), e
    ok("dead_peer")
    os._exit(0)  # the group cannot shut down cleanly without its peer


def stuck_peer():
    """Rank 1 never joins the second collective; rank 0 must time out with the group timeout."""
    timeout = float(os.environ.get("TEST_TIMEOUT_S", "5"))
    device = setup(timeout_s=timeout)
    t = torch.ones(4, device=device)
    dist.all_reduce(t)
    if RANK == 1:
        time.sleep(timeout + 30)  # the test kills it before
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        raise AssertionError("the collective with a stuck peer succeeded")
    except dist.DistBackendError as e:
        elapsed = time.monotonic() - start
        print(f"ERROR after {elapsed:.2f}s: {e}", flush=True)
        # The status says the group's timeout struck. No bound on the time: the default timeout
        # (300 s) would outlast the test's launch timeout, so a group timeout that was not
        # applied still fails the test.
        assert "HAL_ERROR_TIMEOUT" in str(e), e
    ok("stuck_peer")
    os._exit(0)


def local_rank_device():
    """The idiom of nearly every CUDA DDP script: the rank's device is
    torch.device(<device>, LOCAL_RANK), device_count() counts the node's devices."""
    exclusive = os.environ.get("TEST_EXCLUSIVE_DEVICES") == "1"
    count = torch.accelerator.device_count()
    assert count >= WORLD, count
    assert LOCAL_RANK % count == LOCAL_RANK
    # Before any device is chosen, the device without an index is the process's own.
    assert torch.ones(1, device=DEV).device == torch.device(DEV, LOCAL_RANK if exclusive else 0)
    device = torch.device(DEV, LOCAL_RANK)
    torch.accelerator.set_device_index(LOCAL_RANK)
    assert torch.accelerator.current_device_index() == LOCAL_RANK
    assert torch.ones(1, device=DEV).device == device
    assert torch.Stream(DEV).device_index == LOCAL_RANK
    dist.init_process_group(timeout=datetime.timedelta(seconds=60), device_id=device)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).to(device),
                                                device_ids=[LOCAL_RANK])
    model(torch.full((3, 4), float(RANK + 1), device=device)).sum().backward()
    grads = [p.grad.cpu() for p in model.parameters()]
    assert torch.equal(grads[1], torch.full((2,), 3.0)), grads  # the mean of 3 and 3 rows
    ok("local_rank_device")
    if exclusive:
        other = (LOCAL_RANK + 1) % WORLD
        try:
            torch.ones(1, device=torch.device(DEV, other))
        except RuntimeError as e:
            assert f"{DEV}:{other} belongs to the process of local rank {other}" in str(e), str(e)
        else:
            raise AssertionError(f"{DEV}:{other} of local rank {other} was usable")
        module = torch.get_device_module(DEV)
        assert module.memory_allocated(other) == 0
        assert sum(module.memory_allocated(i) for i in range(count)) > 0
        ok("other_rank_device_refused")
    close()


def fsdp2_compile():
    """FSDP2 (fully_shard on each part and on the model) with torch.compile, on the device over
    torch_hal and on the CPU over gloo, in the same processes: the model zoo's Llama-style block
    (SDPA, RMSNorm, SiLU MLP), three SGD steps, each rank its own data; the losses and the full
    parameters after the steps agree within float32 rounding (torch 2.13's Inductor lowers a
    few operations otherwise for a device that is not "cpu" without the patch series)."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from zoo_models import VOCAB, LlamaStyleBlock

    device = setup(device_id=True)
    # The CPU's reference over gloo (the default group has no CPU backend; see ddp()).
    gloo = dist.new_group(backend=f"cpu:gloo,{DEV}:torch_hal")
    meshes = {"cpu": DeviceMesh.from_group(gloo, "cpu"), DEV: init_device_mesh(DEV, (WORLD,))}
    torch.manual_seed(0)
    reference = LlamaStyleBlock()
    results = {}
    for kind, dev in (("cpu", torch.device("cpu")), (DEV, device)):
        torch._dynamo.reset()
        model = copy.deepcopy(reference).to(dev)
        for part in (model.q, model.kv, model.o, model.gate, model.up, model.down):
            fully_shard(part, mesh=meshes[kind])
        fully_shard(model, mesh=meshes[kind])
        step = torch.compile(lambda tokens: F.cross_entropy(
            model(tokens).flatten(0, 1), tokens.flatten()))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        gen = torch.Generator().manual_seed(100 + RANK)
        losses = []
        for _ in range(3):
            tokens = torch.randint(0, VOCAB, (2, 12), generator=gen).to(dev)
            loss = step(tokens)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach().cpu())
        params = {n: p.full_tensor().detach().cpu() for n, p in model.named_parameters()}
        results[kind] = (torch.stack(losses), params)
    (cpu_losses, cpu_params), (dev_losses, dev_params) = results["cpu"], results[DEV]
    torch.testing.assert_close(dev_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for name, value in cpu_params.items():
        torch.testing.assert_close(dev_params[name], value, rtol=1e-5, atol=1e-5, msg=name)
    ok("fsdp2_compile_matches_cpu")
    close()


def profiled_collectives():
    """torch.profiler records the process group's collectives as it records NCCL's: a
    record_param_comms op per call with the collective's name, element counts, dtype, group
    and size, in key_averages() and in the exported Chrome trace, and a kernel row on the
    device's communication stream linked to it, carrying the same fields, the group's global
    ranks and, for a send or receive, its peer."""
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    device = setup()
    x = torch.ones(1000, device=device)
    gathered = torch.empty(1000 * WORLD, device=device)
    message = torch.full((16,), float(RANK), device=device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.all_reduce(x)
        dist.all_gather_into_tensor(gathered, x)
        if RANK == 0:
            dist.send(message, 1)
        elif RANK == 1:
            dist.recv(message, 0)
        torch.accelerator.synchronize()
    assert x.cpu().eq(WORLD).all()
    assert message.cpu().eq(0).all()
    names = {e.key for e in prof.key_averages()}
    assert "record_param_comms" in names, sorted(names)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    comms = [e["args"] for e in events if e.get("name") == "record_param_comms"]
    by_name = {a.get("Collective name"): a for a in comms}
    assert {"allreduce", "all_gather_into_tensor"} <= set(by_name), comms
    allreduce = by_name["allreduce"]
    assert allreduce["In msg nelems"] == 1000 and allreduce["Out msg nelems"] == 1000, allreduce
    assert allreduce["dtype"] == "Float" and allreduce["Group size"] == WORLD, allreduce
    assert by_name["all_gather_into_tensor"]["Out msg nelems"] == 1000 * WORLD
    # The default group's global ranks, as NCCL's process group gives them: 0, 1, ... WORLD - 1.
    assert allreduce["Global rank start"] == 0 and allreduce["Global rank stride"] == 1, allreduce
    # Their device rows: kernels on the communication stream, linked to record_param_comms.
    comm_ids = {e["args"]["External id"] for e in events if e.get("name") == "record_param_comms"}
    rows = {e["name"]: e for e in events if e.get("cat") == "kernel"}
    assert {"hal_allreduce", "hal_all_gather_into_tensor"} <= set(rows), sorted(rows)
    allreduce_row = rows["hal_allreduce"]
    assert allreduce_row["args"]["bytes"] == 4000 and allreduce_row["pid"] == device.index
    assert allreduce_row["args"]["External id"] in comm_ids, allreduce_row
    row = allreduce_row["args"]
    assert row["Collective name"] == "allreduce" and row["dtype"] == "Float", row
    assert row["In msg nelems"] == 1000 and row["Out msg nelems"] == 1000, row
    assert row["Group size"] == WORLD and row["Rank"] == RANK, row
    assert row["Process Group Ranks"] == str(list(range(WORLD))), row
    assert row["Process Group Name"] == allreduce["Process Group Name"], (row, allreduce)
    assert "Peer rank" not in row, row
    assert rows["hal_all_gather_into_tensor"]["args"]["Out msg nelems"] == 1000 * WORLD
    if RANK in (0, 1):
        p2p = rows["hal_send" if RANK == 0 else "hal_recv"]["args"]
        assert p2p["Peer rank"] == 1 - RANK and p2p["In msg nelems" if RANK == 0
                                                    else "Out msg nelems"] == 16, p2p
    ok("profiled_collectives")
    close()


def profiled_ddp():
    """Three DDP steps on the device under torch.profiler; each rank writes its Chrome trace
    to $TEST_TRACE_DIR/rank<r>.json (read by the test with Holistic Trace Analysis)."""
    from torch.profiler import ProfilerActivity, profile

    device = setup(device_id=True)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to(device),
        device_ids=[device.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64, device=device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(3):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        torch.accelerator.synchronize()
    prof.export_chrome_trace(os.path.join(os.environ["TEST_TRACE_DIR"], f"rank{RANK}.json"))
    del model  # before the group (see examples/train_tiny_lm.py)
    ok("profiled_ddp")
    close()


SCENARIOS = {f.__name__: f for f in (collectives, ddp, dead_peer, stuck_peer, local_rank_device,
                                     fsdp2_compile, profiled_collectives, profiled_ddp)}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
