#!/usr/bin/env python3
"""One rank of a soak job: examples/train_tiny_lm.py with DDP, then this rank's leak checks.

    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        python3 soak/ddp_job.py --result FILE [--digests FILE] TRAIN_ARGS...

TRAIN_ARGS are train_tiny_lm.py's (--device hal --steps 10 --checkpoint ckpt.pt ...). The faults
come from the environment (HAL_LAYERS=faults, HAL_FAULTS); this wrapper changes nothing in the
training, it only observes:

  * the outcome: "ok", or the exception that ended the training (type and message: the bridge's
    messages name the HAL call and status, e.g. HAL_ERROR_DEVICE_LOST);
  * after the training ended either way and the process group was destroyed: the device memory
    the caching allocator still counts as allocated, and the file descriptors this process holds
    beyond those it held before the training started (torch keeps some for good, e.g. rank 0's
    TCPStore server: the driver compares with a fault-free run);
  * with --digests (rank 0): the model digest of every checkpoint written, by step, so that the
    soak driver can tell a checkpoint it can load from a checkpoint that is also right.

The result is one JSON object written to --result. Exit status 0 when the training finished,
1 when it raised.
"""

import argparse
import ctypes
import gc
import hashlib
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import train_tiny_lm as lm  # noqa: E402


def model_digest(state_dict):
    """SHA-256 over a model state dict's names, dtypes, shapes and bytes (any device)."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}:".encode())
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()


def open_fds():
    return set(os.listdir("/proc/self/fd"))


def _tcp_sockets():
    """{inode: "local -> remote"} of this process's network namespace's TCP sockets."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            ports = [int(ep.rsplit(":", 1)[1], 16) for ep in cols[1:3]]
            found[cols[9]] = f"tcp port {ports[0]} -> port {ports[1]}"
    return found


# The TCP sockets that existed right after init_process_group returned ({inode: ports}): the
# TCPStore's connections, which torch keeps for the process's life. A connection whose peer died
# (rank 0 killed) is reset and leaves the kernel's TCP tables, so it is recognised by its inode.
STORE_SOCKETS = {}


def note_store_sockets():
    """Wraps dist.init_process_group so that the TCP sockets open right after it are noted."""
    init = dist.init_process_group

    def init_and_note(*args, **kwargs):
        result = init(*args, **kwargs)
        tcp = _tcp_sockets()
        for fd in open_fds():
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            inode = link[len("socket:["):-1] if link.startswith("socket:[") else None
            if inode in tcp:
                STORE_SOCKETS[inode] = tcp[inode]
        return result

    dist.init_process_group = init_and_note


def describe_fds(fds):
    """What each descriptor is: its link, and for TCP sockets the ports (a socket of the store
    no longer in the kernel's tables: the ports it had when the process group started)."""
    tcp = _tcp_sockets()
    out = []
    for fd in sorted(fds, key=int):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        inode = link[len("socket:["):-1] if link.startswith("socket:[") else None
        if inode in tcp:
            out.append(f"{link} ({tcp[inode]})")
        elif inode in STORE_SOCKETS:
            out.append(f"{link} ({STORE_SOCKETS[inode]}, reset)")
        else:
            out.append(link)
    return out


def record_digests(path):
    """Wraps lm.save_checkpoint so that rank 0 appends {step: digest} to path after each save."""
    save = lm.save_checkpoint

    def save_and_record(ckpt_path, step, *args, **kwargs):
        save(ckpt_path, step, *args, **kwargs)
        if int(os.environ.get("RANK", "0")) == 0:
            model = args[2]  # epoch, batch_in_epoch, model, ...
            digests = {}
            if os.path.exists(path):
                with open(path) as f:
                    digests = json.load(f)
            digests[str(step)] = model_digest(lm.unwrap(model).state_dict())
            with open(path + ".tmp", "w") as f:
                json.dump(digests, f)
            os.replace(path + ".tmp", path)

    lm.save_checkpoint = save_and_record


def allocated_bytes(device_type):
    if device_type == "cpu":
        return 0
    module = torch.get_device_module(device_type)
    return sum(module.memory_allocated(i) for i in range(module.device_count()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--result", required=True, help="JSON result file")
    ap.add_argument("--digests", help="rank 0: checkpoint digests by step (JSON)")
    args, train_argv = ap.parse_known_args()
    train_args = lm.parse_args(train_argv)
    if args.digests:
        record_digests(args.digests)
    note_store_sockets()

    fds_before = open_fds()
    result = {"rank": int(os.environ.get("RANK", "0")), "pid": os.getpid(), "outcome": "ok"}
    try:
        lm.train(train_args)
    except Exception as e:  # the outcome under test; anything else is a crash
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        result["outcome"] = "error"
        result["exception"] = f"{type(e).__name__}: {first}"
        traceback.print_exc()
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:  # a communicator that failed may fail to finalize
                result["destroy_error"] = f"{type(e).__name__}: {e}"
    # The training's objects are gone with its frames; what the allocator still counts is a leak.
    gc.collect()
    result["allocated_bytes"] = allocated_bytes(train_args.device)
    result["new_fds"] = describe_fds(open_fds() - fds_before)
    with open(args.result + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(args.result + ".tmp", args.result)
    return 0 if result["outcome"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
