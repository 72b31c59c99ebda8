#!/usr/bin/env python3
"""Randomized fault campaign: the conformance suite and DDP training under HAL_LAYERS=faults.

    python3 soak/soak.py [--runs 200] [--budget 600] [--seed 1] [--smoke] [--junit FILE]

Each run is a fresh process tree with a random fault spec (HAL_FAULTS, hal/layers/README.md:
out-of-memory, device loss, stream failure, collective timeout, peer death) and log=1, so every
injected fault is on record:

  cts  hal_conformance on the cpu backend (HAL_LAYERS=validation,faults), a random handful of
       tests, every test under a per-test timeout;
  ddp  examples/train_tiny_lm.py with DDP on 2 ranks on the cpu-backed torch_hal device
       (soak/ddp_job.py per rank), a checkpoint written every step; in some runs the driver
       also SIGKILLs a rank at a random moment (a crash during a checkpoint save, say).

Every run must end in success or in a clean error: a test failure naming a HAL status, a Python
exception, or death by SIGKILL where one was injected. Counted as bugs:

  crash        death by any other signal, or an exit that is neither success nor a clean error
  hang         the run outlived its timeout, or a test hit the harness's per-test timeout
  leak         a shared-memory segment (/dev/shm/hal-*) left behind; a process of the run still
               alive after it ended; memory or a handle the validation layer reports at close; in
               ddp runs, device memory still allocated, or file descriptors still open after the
               process group was destroyed (beyond what a fault-free run keeps)
  corrupt      a checkpoint left by an interrupted run that loads but differs from the fault-free
               run's checkpoint of the same step (a checkpoint that fails to load is rejected,
               which is correct)
  unexplained  a failure in a run where no fault was injected

Run from the repository root after `bazel build //conformance:hal_conformance
//hal_backends/cpu:libhal_backend_cpu.so` and with torch_hal installed (make soak does both).
Writes out/soak/summary.json (and --junit: one test case per run, plus the targets). Exit
status 1 if any bug was found or, without --smoke, a target was missed.
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))
import junit  # noqa: E402

CONFORMANCE = os.path.join(REPO, "bazel-bin", "conformance", "hal_conformance")
CPU_BACKEND_DIR = os.path.join(REPO, "bazel-bin", "hal_backends", "cpu")
SHM_DIR = "/dev/shm"
SHM_PREFIX = "hal-"
STATUS_RE = re.compile(r"HAL_ERROR_[A-Z_]+")
FAULT_LINE_RE = re.compile(r"^hal-faults: pid=(\d+) kind=(\w+) .*outcome=(\S+)", re.M)

CTS_TESTS_PER_RUN = 6
CTS_TEST_TIMEOUT_S = 20
CTS_RUN_TIMEOUT_S = 120
DDP_STEPS = 8
DDP_PG_TIMEOUT_S = 5
DDP_RUN_TIMEOUT_S = 90


# ---- fault specs --------------------------------------------------------------------------------

def _prob(rng, choices):
    return rng.choice(choices)


def cts_rules(rng):
    """One or two random rules for a conformance run."""
    makers = [
        lambda: f"alloc:p={_prob(rng, ['0.02', '0.1', '0.3'])}",
        lambda: f"alloc:after={rng.randrange(0, 200)},count={rng.randrange(1, 4)}",
        lambda: f"device_lost:after={rng.randrange(0, 3000)},device={rng.randrange(2)}",
        lambda: f"stream_fail:p={_prob(rng, ['0.01', '0.05', '0.2'])}",
        lambda: f"stream_fail:after={rng.randrange(0, 400)}",
        lambda: f"coll_timeout:after={rng.randrange(0, 40)},rank={rng.randrange(4)}",
        lambda: f"peer_death:after={rng.randrange(0, 40)},rank={rng.randrange(1, 4)}",
    ]
    return [rng.choice(makers)() for _ in range(rng.choice((1, 1, 2)))]


def ddp_rules(rng):
    """One random rule for a training run (each rank uses its own device: device = rank)."""
    makers = [
        lambda: f"alloc:p={_prob(rng, ['0.001', '0.01', '0.05'])},device={rng.randrange(2)}",
        lambda: f"alloc:after={rng.randrange(0, 400)},device={rng.randrange(2)}",
        lambda: f"device_lost:after={rng.randrange(0, 6000)},device={rng.randrange(2)}",
        lambda: f"stream_fail:after={rng.randrange(0, 3000)},device={rng.randrange(2)}",
        lambda: f"coll_timeout:after={rng.randrange(0, 60)},rank={rng.randrange(2)}",
        lambda: f"peer_death:after={rng.randrange(0, 60)},rank={rng.randrange(2)}",
    ]
    return [rng.choice(makers)()]


def spec_of(seed, rules):
    return ";".join([f"seed={seed}", "log=1"] + rules)


# ---- process trees and leftovers ----------------------------------------------------------------

def hal_segments():
    try:
        return {n for n in os.listdir(SHM_DIR) if n.startswith(SHM_PREFIX)}
    except OSError:
        return set()


def session_processes(sid):
    """Pids of live processes in session sid (what a run left running)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def reap_session(sid):
    """Kills what is left of a run's session; returns how many processes were left."""
    left = session_processes(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(left)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def signal_name(rc):
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


# ---- one run ------------------------------------------------------------------------------------

class Outcome:
    """What one run did and which bugs it showed."""

    def __init__(self, index, kind, spec):
        self.index, self.kind, self.spec = index, kind, spec
        self.result = "passed"   # passed | clean error | injected death
        self.bugs = []           # (category, detail)
        self.injected = []       # kinds of faults the layer reports as fired
        self.statuses = collections.Counter()
        self.checkpoint = None   # verified | rejected | None
        self.killed_rank = None
        self.seconds = 0.0

    def bug(self, category, detail):
        self.bugs.append((category, detail))

    def line(self):
        what = ", ".join(f"{c}: {d}" for c, d in self.bugs) if self.bugs else self.result
        extra = f" [{', '.join(sorted(set(self.injected)))}]" if self.injected else ""
        if self.killed_rank is not None:
            extra += f" [driver killed rank {self.killed_rank}]"
        if self.checkpoint:
            extra += f" [checkpoint {self.checkpoint}]"
        return f"{self.kind} {self.spec}: {'BUG ' if self.bugs else ''}{what}{extra}"


# The conformance harness fails a test that leaves objects behind under the validation layer
# (tests that leak on purpose say how many they expect).
CTS_LEAK_MESSAGE = "the validation layer counted leaked objects"
# What the validation layer prints at backend close for every object left.
VALIDATION_LEAK_RE = re.compile(r"^hal validation: .*leaked.*$", re.M)


def check_common(out, output, shm_before, sids):
    """Faults fired and statuses seen in output; segments and processes the run left behind."""
    out.injected = [m.group(2) for m in FAULT_LINE_RE.finditer(output)]
    out.statuses.update(STATUS_RE.findall(output))
    leaked = hal_segments() - shm_before
    if leaked:
        out.bug("leak", f"shared memory left: {', '.join(sorted(leaked))}")
        for name in leaked:
            try:
                os.unlink(os.path.join(SHM_DIR, name))
            except OSError:
                pass
    left = sum(reap_session(sid) for sid in sids)
    if left:
        out.bug("leak", f"{left} process(es) of the run still alive after it ended")


def run_cts(index, rng, seed, tests, workdir):
    chosen = rng.sample(tests, min(CTS_TESTS_PER_RUN, len(tests)))
    rules = cts_rules(rng) if rng.random() >= 0.1 else []  # a few fault-free control runs
    spec = spec_of(seed, rules)
    out = Outcome(index, "cts", spec)
    env = dict(os.environ, HAL_LAYERS="validation,faults", HAL_FAULTS=spec,
               HAL_BACKEND_PATH=CPU_BACKEND_DIR, HAL_CTS_TIMEOUT=str(CTS_TEST_TIMEOUT_S))
    shm_before = hal_segments()
    start = time.monotonic()
    # In-process: an injected death must end the harness process itself, whose pid the faults
    # layer's log names (by default each area would run in a child process of its own).
    proc = subprocess.Popen([CONFORMANCE, "--backend=cpu", "--in-process",
                             "--gtest_filter=" + ":".join(chosen)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            cwd=workdir, start_new_session=True, text=True, errors="replace")
    try:
        output, _ = proc.communicate(timeout=CTS_RUN_TIMEOUT_S)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        rc = None
    out.seconds = time.monotonic() - start
    check_common(out, output, shm_before, [proc.pid])
    died_as_injected = any(m.group(1) == str(proc.pid) and m.group(3) == "SIGKILL"
                           for m in FAULT_LINE_RE.finditer(output))
    if CTS_LEAK_MESSAGE in output:
        test = re.findall(r"^\[  FAILED  \] (\S+)", output, re.M)
        out.bug("leak", f"objects left at backend close ({', '.join(sorted(set(test)))})")
    if rc is None:
        out.bug("hang", f"still running after {CTS_RUN_TIMEOUT_S} s")
    elif "[  TIMEOUT ]" in output:
        out.bug("hang", re.search(r"\[  TIMEOUT \] (\S+)", output).group(1) + " timed out")
    elif rc == 0:
        out.result = "passed"
    elif rc == -signal.SIGKILL and died_as_injected:
        out.result = "injected death"
    elif rc < 0:
        out.bug("crash", f"died by {signal_name(rc)}")
    elif rc == 1 and "[  FAILED  ]" in output:
        out.result = "clean error"
        failed = ", ".join(sorted(set(re.findall(r"^\[  FAILED  \] (\S+)", output, re.M))))
        if not out.injected:
            out.bug("unexplained", f"no fault injected, yet {failed} failed")
        elif not out.statuses:
            out.bug("unexplained", f"{failed} failed without naming a HAL status")
    else:
        out.bug("crash", f"exit status {rc} without a test failure")
    return out, output


def normalize_fd(link, master_port):
    """A descriptor's kind for comparison with a fault-free run; None if it is torch's store."""
    if f"port {master_port}" in link:
        return None  # a TCPStore connection: torch's, kept by it for the process's life
    return re.sub(r"\[\d+\]", "[]", link.split(" (")[0])


def run_ddp(index, rng, seed, workdir, control):
    """control: None for the fault-free run itself, else its results (digests, fds)."""
    rules = ddp_rules(rng) if control is not None else []
    kill = control is not None and rng.random() < 0.25
    spec = spec_of(seed, rules)
    out = Outcome(index, "ddp", spec)
    run_dir = os.path.join(workdir, f"ddp-{index}")
    os.makedirs(run_dir, exist_ok=True)
    ckpt = os.path.join(run_dir, "ckpt.pt")
    digests = os.path.join(run_dir, "digests.json")
    port = free_port()
    shm_before = hal_segments()
    procs = []
    start = time.monotonic()
    for rank in range(2):
        env = dict(os.environ, HAL_LAYERS="validation,faults", HAL_FAULTS=spec,
                   TORCH_HAL_BACKEND="cpu", OMP_NUM_THREADS="1", RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [sys.executable, os.path.join(HERE, "ddp_job.py"),
               "--result", os.path.join(run_dir, f"result-{rank}.json"),
               "--digests", digests, "--device", "hal", "--steps", str(DDP_STEPS),
               "--checkpoint", ckpt, "--checkpoint-every", "1", "--print-every", "100",
               "--corpus-tokens", "20000", "--timeout", str(DDP_PG_TIMEOUT_S)]
        log = open(os.path.join(run_dir, f"rank-{rank}.log"), "w")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       cwd=run_dir, start_new_session=True), log))
    if kill:
        out.killed_rank = rng.randrange(2)
        deadline = start + rng.uniform(2.0, 6.0)
        while time.monotonic() < deadline and procs[out.killed_rank][0].poll() is None:
            time.sleep(0.05)
        if procs[out.killed_rank][0].poll() is None:
            procs[out.killed_rank][0].kill()
        else:
            out.killed_rank = None  # it had ended already
    rcs = []
    for p, log in procs:
        try:
            rcs.append(p.wait(timeout=max(1.0, DDP_RUN_TIMEOUT_S - (time.monotonic() - start))))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rcs.append(None)
        log.close()
    out.seconds = time.monotonic() - start
    outputs = []
    for rank in range(2):
        with open(os.path.join(run_dir, f"rank-{rank}.log"), errors="replace") as f:
            outputs.append(f.read())
    output = "\n".join(outputs)
    check_common(out, output, shm_before, [p.pid for p, _ in procs])
    m = VALIDATION_LEAK_RE.search(output)
    if m:
        out.bug("leak", m.group(0))

    results = []
    for rank, rc in enumerate(rcs):
        pid = procs[rank][0].pid
        res = None
        path = os.path.join(run_dir, f"result-{rank}.json")
        if os.path.exists(path):
            with open(path) as f:
                res = json.load(f)
        results.append(res)
        killed_as_injected = out.killed_rank == rank or any(
            m.group(1) == str(pid) and m.group(3) == "SIGKILL"
            for m in FAULT_LINE_RE.finditer(output))
        if rc is None:
            out.bug("hang", f"rank {rank} still running after {DDP_RUN_TIMEOUT_S} s")
        elif rc == -signal.SIGKILL and killed_as_injected:
            out.result = "injected death"
        elif rc < 0:
            out.bug("crash", f"rank {rank} died by {signal_name(rc)}")
        elif res is None:
            out.bug("crash", f"rank {rank} exited with status {rc} and no result")
        elif rc == 1 and res["outcome"] == "error":
            if out.result == "passed":
                out.result = "clean error"
            if not out.injected and out.killed_rank is None:
                out.bug("unexplained", f"rank {rank}: {res['exception']}")
        elif rc != 0:
            out.bug("crash", f"rank {rank} exited with status {rc}")
        if res is not None:
            if res["allocated_bytes"]:
                out.bug("leak", f"rank {rank}: {res['allocated_bytes']} bytes of device memory "
                                "still allocated")
            kinds = collections.Counter(k for k in (normalize_fd(link, port)
                                                    for link in res["new_fds"]) if k)
            allowed = control["fds"][rank] if control else kinds
            extra = kinds - allowed
            if extra:
                shown = [link for link in res["new_fds"] if normalize_fd(link, port) in extra]
                out.bug("leak", f"rank {rank}: file descriptors left open: {', '.join(shown)}")
    if control is None:
        info = {"fds": [collections.Counter(
            k for k in (normalize_fd(link, port) for link in (r or {}).get("new_fds", [])) if k)
            for r in results], "digests": _load_json(digests)}
        # The verifier must accept the fault-free run's own last checkpoint.
        if os.path.exists(ckpt) and not out.bugs:
            seen = verify_checkpoint(ckpt, info["digests"], out)
            if not seen.endswith("verified"):
                out.bug("corrupt", f"the fault-free run's own checkpoint was {seen}")
        return out, output, info
    # A checkpoint that loads must be the fault-free run's checkpoint of the same step.
    if os.path.exists(ckpt):
        out.checkpoint = verify_checkpoint(ckpt, control["digests"], out)
    shutil.rmtree(run_dir, ignore_errors=True)
    return out, output, None


def _load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def verify_checkpoint(path, digests, out):
    # Imported here, not at start: the driver needs torch only for this, and loads checkpoints
    # to the CPU without the device (torch_hal not loaded; the runs' environment is unchanged).
    if "torch" not in sys.modules:
        saved = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        import torch  # noqa: F401
        if saved is None:
            del os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"]
        else:
            os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = saved
    import torch

    from ddp_job import model_digest
    try:
        ckpt = torch.load(path, map_location="cpu")
        step = ckpt["step"]
        digest = model_digest(ckpt["model"])
    except Exception:
        return "rejected"
    want = digests.get(str(step))
    if want is None:
        out.bug("corrupt", f"checkpoint of step {step}, a step the fault-free run never saved")
    elif digest != want:
        out.bug("corrupt", f"checkpoint of step {step} loads but differs from the fault-free one")
    return f"of step {step} verified" if digest == want else "corrupt"


# ---- the campaign -------------------------------------------------------------------------------

def list_tests():
    env = dict(os.environ, HAL_BACKEND_PATH=CPU_BACKEND_DIR)
    text = subprocess.run([CONFORMANCE, "--backend=cpu", "--gtest_list_tests"], env=env,
                          capture_output=True, text=True, check=True).stdout
    tests, suite = [], None
    for line in text.splitlines():
        if not line.startswith(" "):
            suite = line.strip()
        else:
            name = line.strip().split()[0]
            tests.append(suite + name)
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="runs to make (default 200)")
    ap.add_argument("--budget", type=float, default=600,
                    help="seconds after which no new run starts (default 600)")
    ap.add_argument("--seed", type=int, default=1, help="campaign seed (default 1)")
    ap.add_argument("--ddp-every", type=int, default=4,
                    help="every Nth run is a training run (default 4)")
    ap.add_argument("--smoke", action="store_true",
                    help="a short campaign for CI: 12 runs, 180 s, no run-count target")
    ap.add_argument("--out", default=os.path.join(REPO, "out", "soak"))
    ap.add_argument("--junit", help="write JUnit XML here")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.budget = 12, 180
    if not os.access(CONFORMANCE, os.X_OK):
        sys.exit(f"soak: {CONFORMANCE} is missing: bazel build //conformance:hal_conformance "
                 "//hal_backends/cpu:libhal_backend_cpu.so (make soak does)")
    os.makedirs(args.out, exist_ok=True)
    workdir = os.path.join(args.out, "work")
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    rng = random.Random(args.seed)
    tests = list_tests()
    print(f"soak: {args.runs} runs (every {args.ddp_every}th a 2-rank DDP training), seed "
          f"{args.seed}, budget {args.budget:.0f} s; {len(tests)} conformance tests to draw from",
          flush=True)

    start = time.monotonic()
    control, _, control_info = run_ddp(0, rng, args.seed, workdir, None)
    if control.bugs or control.result != "passed":
        print(f"soak: the fault-free training run failed: {control.line()}", file=sys.stderr)
        print(_, file=sys.stderr)
        return 1
    print(f"soak: fault-free training run: {control.seconds:.1f} s, "
          f"{len(control_info['digests'])} checkpoints", flush=True)

    outcomes = []
    logs_dir = os.path.join(args.out, "bugs")
    shutil.rmtree(logs_dir, ignore_errors=True)
    for i in range(1, args.runs + 1):
        elapsed = time.monotonic() - start
        if elapsed > args.budget:
            print(f"soak: budget of {args.budget:.0f} s spent after {i - 1} runs", flush=True)
            break
        seed = rng.randrange(1 << 32)
        if i % args.ddp_every == 0:
            out, output, _ = run_ddp(i, rng, seed, workdir, control_info)
        else:
            out, output = run_cts(i, rng, seed, tests, workdir)
        outcomes.append(out)
        if out.bugs:
            os.makedirs(logs_dir, exist_ok=True)
            with open(os.path.join(logs_dir, f"run-{i}.log"), "w") as f:
                f.write(out.line() + "\n\n" + output)
        print(f"[{i:4d}/{args.runs} {elapsed:5.0f} s] {out.line()}", flush=True)

    return report(args, outcomes, time.monotonic() - start)


def report(args, outcomes, seconds):
    bugs = collections.Counter(c for o in outcomes for c, _ in o.bugs)
    results = collections.Counter(o.result for o in outcomes if not o.bugs)
    injected = collections.Counter(k for o in outcomes for k in set(o.injected))
    statuses = collections.Counter()
    for o in outcomes:
        statuses.update(set(o.statuses))
    ckpts = collections.Counter(("verified" if o.checkpoint.endswith("verified") else o.checkpoint)
                                for o in outcomes if o.checkpoint)
    kinds = collections.Counter(o.kind for o in outcomes)
    summary = {
        "runs": len(outcomes), "seconds": round(seconds, 1), "by_kind": dict(kinds),
        "results": dict(results), "bugs": {c: bugs.get(c, 0) for c in
                                           ("crash", "hang", "leak", "corrupt", "unexplained")},
        "faults_fired_in_runs": dict(injected), "statuses_seen_in_runs": dict(statuses),
        "checkpoints_after_interrupted_runs": dict(ckpts),
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)

    print()
    print(f"soak: {len(outcomes)} runs in {seconds:.0f} s ({kinds['cts']} conformance, "
          f"{kinds['ddp']} DDP training)")
    print("  outcomes:   " + ", ".join(f"{n} {r}" for r, n in results.most_common()))
    print("  faults:     " + ", ".join(f"{k} fired in {n} runs" for k, n in injected.most_common()))
    print("  statuses:   " + ", ".join(f"{s} ({n})" for s, n in statuses.most_common()))
    print("  checkpoints left by interrupted runs: " + (", ".join(
        f"{n} {c}" for c, n in ckpts.most_common()) or "none"))
    targets = [
        ("runs", len(outcomes), ">= 200", len(outcomes) >= 200 or args.smoke),
        ("crashes", bugs["crash"], "0", bugs["crash"] == 0),
        ("hangs", bugs["hang"], "0", bugs["hang"] == 0),
        ("leaks", bugs["leak"], "0", bugs["leak"] == 0),
        ("corrupt checkpoints accepted", bugs["corrupt"], "0", bugs["corrupt"] == 0),
        ("unexplained failures", bugs["unexplained"], "0", bugs["unexplained"] == 0),
    ]
    for name, value, want, ok in targets:
        note = " (smoke: not a target)" if name == "runs" and args.smoke else ""
        print(f"target: {name} {value} (want {want}){note} ... {'met' if ok else 'MISSED'}")
    if bugs:
        print(f"soak: the logs of the runs with bugs are in {os.path.join(args.out, 'bugs')}")
    if args.junit:
        cases = [junit.Case(f"run {o.index:04d} {o.kind}", "fail" if o.bugs else "pass",
                            o.line()) for o in outcomes]
        cases += [junit.Case(f"target: {name} {want}", "pass" if ok else "fail",
                             f"{name}: {value}, want {want}") for name, value, want, ok in targets]
        junit.write(args.junit, "soak" + ("-smoke" if args.smoke else ""), cases)
    return 0 if all(ok for *_, ok in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
