"""torch.distributed on torch_hal devices: the "torch_hal" c10d backend, DDP and the example.

In-process tests use the backend the test run loaded (TORCH_HAL_BACKEND). The multi-process
tests start their own ranks (2 processes, environment as torchrun sets it, or torchrun itself)
on the cpu backend, and the *_trainium tests on the Trainium backend over the bundled libnrt
emulator (each rank claims its own NeuronCore; the emulator's core locks live in a directory of
the test, so they never collide with cores this process holds). The multi-process tests are
marked own_backend (own_backend_trainium: those on the Trainium backend): they are the same
whatever backend the run loaded.
"""

import datetime
import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

import torch_hal

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
TRAIN = os.path.join(EXAMPLES, "train_tiny_lm.py")

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(backend, tmp_path, extra=None):
    env = dict(os.environ)
    for name in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_NUM_CORES", "RANK", "LOCAL_RANK",
                 "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["TORCH_HAL_BACKEND"] = backend
    env["OMP_NUM_THREADS"] = "1"
    if backend == "trainium":
        emulator = os.path.join(torch_hal._LIB_DIR, "libnrt.so.1")
        env["HAL_NEURON_LIBNRT"] = emulator
        env["NEURON_EMU_LOCK_DIR"] = str(tmp_path / "neuron-locks")
    env.update(extra or {})
    return env


def need_emulator():
    """The *_trainium tests ask for the Trainium backend on the bundled emulator: without it they
    fail (a test that cannot run what it was asked to is not a skip)."""
    if not os.path.exists(os.path.join(torch_hal._LIB_DIR, "libnrt.so.1")):
        pytest.fail("torch_hal was built without the libnrt emulator "
                    f"({torch_hal._LIB_DIR}/libnrt.so.1 is missing)", pytrace=False)


def launch(scenario, tmp_path, backend="cpu", nprocs=2, extra_env=None, timeout=180):
    """Starts the ranks with torchrun's environment variables; returns [(rc, out, err)].

    Waits for rank 0, then gives the others a few seconds and kills what is left (a scenario
    may leave a rank stuck on purpose)."""
    port = free_port()
    procs = []
    for rank in range(nprocs):
        env = child_env(backend, tmp_path, extra_env)
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nprocs),
                   LOCAL_WORLD_SIZE=str(nprocs), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, WORKER, scenario], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    try:
        out, err = procs[0].communicate(timeout=timeout)
        results.append((procs[0].returncode, out, err))
        for p in procs[1:]:
            try:
                out, err = p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def torchrun(args, tmp_path, backend="cpu", timeout=300, extra_env=None):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", *args]
    return subprocess.run(cmd, env=child_env(backend, tmp_path, extra_env), capture_output=True,
                          text=True, timeout=timeout)


def check_ok(results, names, ranks=None):
    for rank, (rc, out, err) in enumerate(results):
        if ranks is not None and rank not in ranks:
            continue
        assert rc == 0, f"rank {rank} failed (exit {rc}):\n{out}\n{err}"
        for name in names:
            assert f"OK {name}" in out.splitlines(), \
                f"rank {rank} did not report {name}:\n{out}\n{err}"


COLLECTIVE_CHECKS = ["default_backend", "all_reduce_ops_dtypes", "all_reduce_bool_complex_large",
                     "all_reduce_empty", "unsupported_ops_raise", "broadcast", "reduce",
                     "all_gather", "reduce_scatter", "all_to_all", "gather_scatter", "send_recv",
                     "coalesced", "async_work_future", "streams", "barrier_objects",
                     "cpu_tensor_rejected"]


# ---- Registration and default selection (in process) ---------------------------------------------

def test_backend_registered_as_device_default(device_type):
    assert torch_hal.distributed.is_registered()
    assert dist.Backend.default_device_backend_map[device_type] == "torch_hal"
    assert dist.get_default_backend_for_device(device_type) == "torch_hal"
    assert dist.Backend.backend_capability["torch_hal"] == [device_type]
    assert dist.Backend("torch_hal") == "torch_hal"
    assert issubclass(torch_hal._C.ProcessGroupHAL, torch._C._distributed_c10d.Backend)


def _in_process_group(device_type, **kwargs):
    store = dist.HashStore()
    dist.init_process_group(store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30), **kwargs)
    try:
        backend = dist.group.WORLD._get_backend(torch.device(device_type, 0))
        assert isinstance(backend, torch_hal._C.ProcessGroupHAL)
        t = torch.arange(4.0, device=device_type)
        dist.all_reduce(t)
        assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        assert backend.comm_device == 0
        work = dist.all_reduce(t, async_op=True)
        assert work.wait() and work.is_completed()
        return backend
    finally:
        dist.destroy_process_group()


def test_init_without_backend_picks_torch_hal(device_type):
    _in_process_group(device_type)


def test_init_with_device_id_picks_torch_hal(device_type):
    _in_process_group(device_type, device_id=torch.device(device_type, 0))


def test_cpu_and_device_backends_together(device_type):
    store = dist.HashStore()
    dist.init_process_group(f"cpu:gloo,{device_type}:torch_hal", store=store, rank=0,
                            world_size=1)
    try:
        cpu_t, dev_t = torch.ones(3), torch.ones(3, device=device_type)
        dist.all_reduce(cpu_t)
        dist.all_reduce(dev_t)
        assert isinstance(dist.group.WORLD._get_backend(torch.device(device_type)),
                          torch_hal._C.ProcessGroupHAL)
        assert dev_t.cpu().tolist() == cpu_t.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


# ---- Two processes, cpu backend ----------------------------------------------------------------------

@pytest.mark.own_backend
def test_collectives_two_ranks(tmp_path):
    check_ok(launch("collectives", tmp_path), COLLECTIVE_CHECKS)


@pytest.mark.own_backend
def test_ddp_step_matches_cpu(tmp_path):
    check_ok(launch("ddp", tmp_path), ["default_backend", "ddp_matches_cpu"])


@pytest.mark.own_backend
@pytest.mark.zoo
def test_fsdp2_with_compile_matches_cpu(tmp_path):
    """The model zoo's Llama-style block under FSDP2 and torch.compile on two ranks
    (test_model_zoo.py trains the zoo on one device)."""
    check_ok(launch("fsdp2_compile", tmp_path, timeout=900), ["fsdp2_compile_matches_cpu"])


@pytest.mark.own_backend
def test_profiler_records_collectives(tmp_path):
    check_ok(launch("profiled_collectives", tmp_path), ["default_backend", "profiled_collectives"])


@pytest.mark.own_backend
def test_hta_breaks_down_a_two_rank_ddp_trace(tmp_path, monkeypatch):
    """Holistic Trace Analysis reads the two ranks' traces of a DDP run on the device: its
    temporal breakdown (idle, compute, non-compute time per rank) and its kernel breakdown
    find the device's kernels and copies. HTA tells communication kernels by NCCL's names, so
    the collectives' rows (hal_allreduce) count as computation there. HTA rounds
    nanosecond timestamps by raising each start and lowering each end to a whole microsecond,
    which gives an event shorter than a microsecond inside one a negative duration and trips
    its own check; the cpu backend's copies take 0.1-0.5 us, so the test turns that rounding
    off with HTA's own option."""
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    from hta.trace_analysis import TraceAnalysis

    traces = tmp_path / "traces"
    traces.mkdir()
    check_ok(launch("profiled_ddp", tmp_path, extra_env={"TEST_TRACE_DIR": str(traces)}),
             ["profiled_ddp"])
    analysis = TraceAnalysis(trace_dir=str(traces))
    temporal = analysis.get_temporal_breakdown(visualize=False)
    assert sorted(temporal["rank"]) == [0, 1]
    assert (temporal["compute_time(us)"] > 0).all(), temporal
    kernels = analysis.get_gpu_kernel_breakdown(visualize=False)[0]
    assert {"COMPUTATION", "MEMORY"} <= set(kernels["kernel_type"]), kernels


@pytest.mark.own_backend
def test_device_of_local_rank(tmp_path):
    check_ok(launch("local_rank_device", tmp_path), ["local_rank_device"])


@pytest.mark.own_backend
def test_killed_peer_raises_within_timeout(tmp_path):
    results = launch("dead_peer", tmp_path, extra_env={"TEST_TIMEOUT_S": "5"}, timeout=90)
    check_ok(results, ["dead_peer"], ranks=[0])
    assert "HAL_ERROR_REMOTE" in results[0][1] or "HAL_ERROR_TIMEOUT" in results[0][1]


@pytest.mark.own_backend
def test_stuck_peer_times_out(tmp_path):
    results = launch("stuck_peer", tmp_path, extra_env={"TEST_TIMEOUT_S": "4"}, timeout=90)
    check_ok(results, ["stuck_peer"], ranks=[0])


# ---- The example: losses on the device equal the CPU's ---------------------------------------------

@pytest.mark.own_backend
@pytest.mark.skipif(not os.path.exists(TRAIN), reason="examples/ is not next to bridge/")
def test_example_loss_alignment_and_resume(tmp_path):
    def run(device, log, *extra):
        proc = torchrun([TRAIN, "--device", device, "--steps", "5", "--print-every", "5",
                         "--corpus-tokens", "50000", "--loss-log", str(log), *extra], tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        with open(log) as f:
            return [s["loss"] for s in json.load(f)["steps"]]

    cpu = run("cpu", tmp_path / "cpu.json")
    # 5 steps on the device, saving a checkpoint after step 3 (saving changes no loss)
    ckpt = tmp_path / "ckpt.pt"
    hal = run("hal", tmp_path / "hal.json", "--checkpoint", str(ckpt), "--checkpoint-every", "3")
    assert len(cpu) == len(hal) == 5
    assert hal == cpu, f"losses differ:\ncpu {cpu}\nhal {hal}"  # bit-exact
    # resume from step 3 to 5: the same losses as the uninterrupted run
    run_args = ["--checkpoint", str(ckpt), "--resume"]
    proc = torchrun([TRAIN, "--device", "hal", "--steps", "5", "--corpus-tokens", "50000",
                     "--loss-log", str(tmp_path / "resumed2.json"), *run_args], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resumed from" in proc.stdout
    with open(tmp_path / "resumed2.json") as f:
        resumed = {s["step"]: s["loss"] for s in json.load(f)["steps"]}
    assert [resumed[k] for k in (4, 5)] == hal[3:]


# ---- Two processes, Trainium backend (libnrt emulator) --------------------------------------------

# The Trainium backend runs all-reduce, all-gather and reduce-scatter on the runtime's out-of-NEFF
# collectives (native, the default); HAL_NEURON_NATIVE_COLLECTIVES=0 leaves every collective to
# the HAL's host-staged ones. Both paths run. At NEURON_RT_LOG_LEVEL=INFO the backend writes the
# path it takes and the runtime logs each core joining its global communicator.
COLLECTIVE_PATHS = {
    "native": {"NEURON_RT_LOG_LEVEL": "INFO"},
    "host": {"NEURON_RT_LOG_LEVEL": "INFO", "HAL_NEURON_NATIVE_COLLECTIVES": "0"},
}


def check_collective_path(path, log):
    if path == "native":
        assert "collectives: native all-reduce, all-gather, reduce-scatter" in log, log
        assert "is global device" in log, log  # a native communicator was built
    else:
        assert "collectives: host-staged (HAL_NEURON_NATIVE_COLLECTIVES=0)" in log, log
        assert "is global device" not in log, log


@pytest.mark.own_backend_trainium
@pytest.mark.parametrize("path", sorted(COLLECTIVE_PATHS))
def test_collectives_two_ranks_trainium(tmp_path, path):
    need_emulator()
    # Through torchrun: its launcher process must not take the NeuronCores (torch_hal does not
    # open the backend there), and each rank claims its own (NEURON_RT_VISIBLE_CORES=LOCAL_RANK).
    proc = torchrun([WORKER, "collectives"], tmp_path, backend="trainium",
                    extra_env={"TEST_OK_DIR": str(tmp_path), **COLLECTIVE_PATHS[path]})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(2):
        reported = (tmp_path / f"rank{rank}.txt").read_text().splitlines()
        for name in COLLECTIVE_CHECKS:
            assert f"OK {name}" in reported, (rank, name, proc.stdout, proc.stderr)
    check_collective_path(path, proc.stdout + proc.stderr)


@pytest.mark.own_backend_trainium
@pytest.mark.parametrize("path", sorted(COLLECTIVE_PATHS))
def test_ddp_step_matches_cpu_trainium(tmp_path, path):
    need_emulator()
    results = launch("ddp", tmp_path, backend="trainium", extra_env=COLLECTIVE_PATHS[path])
    check_ok(results, ["default_backend", "ddp_matches_cpu"])
    for rc, out, err in results:
        check_collective_path(path, out + err)


@pytest.mark.own_backend_trainium
def test_neuron_cores_claimed_per_local_rank(tmp_path):
    need_emulator()
    # The backend sets the runtime's variable in the C environment (os.environ is a copy taken at
    # startup), so the child reads it with getenv.
    code = ("import ctypes, torch, torch_hal; getenv = ctypes.CDLL(None).getenv; "
            "getenv.restype = ctypes.c_char_p; v = getenv(b'NEURON_RT_VISIBLE_CORES'); "
            "print(torch_hal.is_loaded(), v.decode() if v else None, "
            "torch.accelerator.device_count())")
    env = child_env("trainium", tmp_path, {"LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # the node's 32 cores (the emulated trn1.32xlarge) are counted, as CUDA counts a node's GPUs
    assert out.stdout.split() == ["True", "1", "32"], out.stdout
    # an explicit setting is kept
    env["NEURON_RT_VISIBLE_CORES"] = "2-3"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "2-3", "32"], out.stdout + out.stderr


@pytest.mark.own_backend_trainium
def test_device_of_local_rank_trainium(tmp_path):
    # Under torchrun, each rank's NeuronCore is torch.device("neuron", LOCAL_RANK), and the other
    # rank's is refused, naming its local rank.
    need_emulator()
    proc = torchrun([WORKER, "local_rank_device"], tmp_path, backend="trainium",
                    extra_env={"TEST_OK_DIR": str(tmp_path), "TEST_EXCLUSIVE_DEVICES": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(2):
        reported = (tmp_path / f"rank{rank}.txt").read_text().splitlines()
        for name in ("local_rank_device", "other_rank_device_refused"):
            assert f"OK {name}" in reported, (rank, name, proc.stdout, proc.stderr)


SPAWN_PARENT = textwrap.dedent("""
    import multiprocessing, sys
    import torch

    def child(queue):
        try:
            queue.put(("ok", (torch.ones(3, device="neuron:0") * 2).cpu().tolist()))
        except Exception as exc:  # the child's error, for the parent to print
            queue.put(("error", str(exc)))

    if __name__ == "__main__":
        if sys.argv[1] == "used":
            torch.ones(1, device="neuron:0").cpu()
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        p = ctx.Process(target=child, args=(queue,))
        p.start()
        p.join(120)
        assert not p.is_alive(), "the child hung"
        print(queue.get(timeout=10))
""")


@pytest.mark.own_backend_trainium
@pytest.mark.parametrize("parent", ["unused", "used"])
def test_spawned_child_takes_the_cores_the_parent_did_not_use(tmp_path, parent):
    # `import torch` takes no NeuronCore: a spawned child of a parent that used no device runs on
    # neuron:0; a parent that used the device holds the cores, and the child's first use fails
    # at once naming nrt_init and why (never a hang, never torch's generic device error).
    need_emulator()
    script = tmp_path / "spawn_parent.py"
    script.write_text(SPAWN_PARENT)
    env = child_env("trainium", tmp_path, {"NEURON_EMU_INSTANCE_ID": f"spawn-{parent}"})
    out = subprocess.run([sys.executable, str(script), parent], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    if parent == "unused":
        assert "('ok', [2.0, 2.0, 2.0])" in out.stdout, out.stdout + out.stderr
    else:
        assert "('error'," in out.stdout, out.stdout + out.stderr
        assert "nrt_init" in out.stdout and "owned exclusively by one process" in out.stdout, \
            out.stdout


@pytest.mark.own_backend_trainium
def test_launcher_does_not_open_a_backend_with_exclusive_devices(tmp_path):
    # torchrun's launcher imports torch but uses no device: a backend whose devices belong to one
    # process each (HAL_BACKEND_FLAG_EXCLUSIVE_DEVICES, read with hal_backend_probe) stays
    # closed there; any other backend opens as in every process.
    need_emulator()
    code = ("import sys; sys.argv = ['torchrun']; import torch, torch_hal; "
            "print(torch_hal.is_loaded()); print(torch_hal.load_error())")
    for backend, loaded in (("trainium", "False"), ("cpu", "True")):
        env = child_env(backend, tmp_path, {})
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == loaded, (backend, out.stdout, out.stderr)
        if backend == "trainium":
            assert "torchrun launcher" in lines[1], lines
