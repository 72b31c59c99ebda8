#!/usr/bin/env python3
"""Writes the committed seed corpora, fuzz/corpus/<target>/, from the formats the targets parse.

Run from the repository root after a format changes: python3 fuzz/make_corpus.py
Seeds are small and valid (or nearly), so that each target starts from inputs that get past its
first checks; libFuzzer mutates from there. The patch_header seeds are the series' own patches.
"""

import glob
import hashlib
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target: str, data: bytes) -> None:
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- unique ids (layout in hal/src/comm/bootstrap_internal.h) ----


def addr_block(family: int, port: int, addr: bytes, scope: int = 0) -> bytes:
    if family == 0:
        return bytes(24)
    return struct.pack(">BBHI", family, 0, port, scope) + addr.ljust(16, b"\0")


def unique_id(flags: int, block: bytes, secret: bytes, nonce: bytes) -> bytes:
    out = b"HALB" + struct.pack(">HH", 1, flags) + block + secret + nonce
    return out.ljust(128, b"\0")


SECRET = bytes(range(1, 33))
NONCE = bytes(range(0x40, 0x50))
ID_V4 = unique_id(0, addr_block(4, 29500, bytes([127, 0, 0, 1])), SECRET, NONCE)
ID_V6 = unique_id(0, addr_block(6, 29501, bytes(15) + b"\1", 0), SECRET, NONCE)
ID_STORE = unique_id(1, addr_block(0, 0, b""), SECRET, NONCE)


def corpus_unique_id() -> None:
    for seed in (ID_V4, ID_V6, ID_STORE):
        write("unique_id", seed)
    write("unique_id", ID_V4[:127] + b"\1")  # a reserved byte set
    write("unique_id", b"HALB" + ID_V4[4:32] + bytes(32) + ID_V4[64:])  # zero secret


# ---- the bootstrap wire (modes of fuzz/fuzz_bootstrap_wire.c) ----


def frame(kind: int, tag: int, payload: bytes) -> bytes:
    return struct.pack(">IIQ", kind, tag, len(payload)) + payload


def corpus_bootstrap_wire() -> None:
    # 0: root. One connection that authenticates (flag 1) and says hello (8) for a 1-rank job:
    # bytes: nconn-1, flags, claimed rank, hello fields (nranks-1, pid, hash, family, port), chunk.
    write("bootstrap_wire", bytes([0, 0, 1 | 8, 0, 0, 7, 9, 0, 80, 0]))
    # two connections of a 2-rank job, the second also hanging up (32)
    write("bootstrap_wire", bytes([0, 1, 1 | 8, 0, 1, 7, 9, 0, 80, 0, 1 | 8 | 32, 1, 1, 8, 9, 1, 81, 0]))
    # a stranger without the secret, and one claiming to be a peer (2)
    write("bootstrap_wire", bytes([0, 0, 0, 14]) + b"HALW" + bytes(108))
    write("bootstrap_wire", bytes([0, 0, 1 | 2 | 8, 0, 0, 1, 1, 0, 80, 0]))
    # 1: the root's reply. nranks-1, rank, flags: a good table (1|4), an error frame (2).
    write("bootstrap_wire", bytes([1, 1, 0, 1 | 4]))
    write("bootstrap_wire", bytes([1, 0, 0, 2, 11, 5]) + b"late!")
    write("bootstrap_wire", bytes([1, 2, 1, 1 | 4 | 8]))
    write("bootstrap_wire", bytes([1, 0, 0, 0]) + frame(3, 13, b"rank 1 left"))
    # 2: connecting: a well-formed AUTH1 (1) then an AUTH3 status.
    write("bootstrap_wire", bytes([2, 1, 0x33]) + struct.pack(">I", 0) + bytes(36))
    write("bootstrap_wire", bytes([2, 1 | 2 | 4, 0x33]) + struct.pack(">I", 2) + bytes(36))
    # 3: accepting: nranks-1, rank, flags (1 proves the secret; 2|4|8|16 make the claims right).
    write("bootstrap_wire", bytes([3, 3, 2, 1 | 2 | 4 | 8 | 16]) + bytes(40) + bytes([0, 0, 0, 1]) + bytes(68))
    write("bootstrap_wire", bytes([3, 1, 1, 0]) + b"HALW\0\1\0\2" + bytes(104))
    # 4: frames. rank, ops-1, plan (tag, size, op) x ops, lead, then raw bytes.
    write("bootstrap_wire", bytes([4, 0, 1, 1, 8, 0, 0, 8, 0, 2]) + frame(4, 1, bytes(8)))
    write("bootstrap_wire", bytes([4, 1, 0, 0, 4, 3, 1 | 4]) + frame(5, 2, b"abcd"))
    write("bootstrap_wire", bytes([4, 0, 3, 0, 4, 0, 1, 4, 0, 2, 4, 2, 3, 4, 1, 3 | 8]))
    write("bootstrap_wire", bytes([4, 0, 0, 0, 4, 0, 0]) + frame(4, 0, b"") + struct.pack(">IIQ", 4, 0, 1 << 40))


# ---- environment variables ----


def corpus_faults_spec() -> None:
    for spec in (
        "seed=42;alloc:p=0.01;device_lost:after=100,device=1;stream_fail:p=0.001;"
        "coll_timeout:after=5,rank=1;peer_death:after=3,rank=2",
        "alloc",
        "alloc:after=3,count=5;log=1",
        " stream_fail : p = 0.5 , device = 0 ",
        "device_lost:p=1.000",
        "seed=18446744073709551615;coll_timeout:p=0.0000000000000000001,rank=4095",
        "alloc:p=1.5",
    ):
        write("faults_spec", spec.encode())


def corpus_layers_env() -> None:
    for value in ("validation", "trace", "trace,faults", "validation, trace faults", "bogus"):
        write("layers_env", b"\0" + value.encode())
    for value in ("hal-trace-%p.json", "/tmp/t-%%-%p", "trace.json", "%d"):
        write("layers_env", b"\1" + value.encode())


def corpus_cpu_env() -> None:
    for value in ("2\n16G\n4\n20", "64\n1KiB\n4096\n0", "1\n1048576\n1\n1000000", "\n4TB\n\n", "65\n0\n0\n"):
        write("cpu_env", value.encode())


def corpus_comm_bind() -> None:
    for value in ("127.0.0.1", "127.0.0.1:29500", "[::1]:29500", "::1", "0.0.0.0:0", "localhost:1234",
                  "[fe80::1%1]:80", "host-name.example", "1.2.3:4"):
        write("comm_bind", value.encode())


def corpus_comm_timeout() -> None:
    # " -18446744073709551615": a sign after blanks, which strtoull wraps to 1 (found by the
    # fuzzer; HAL_COMM_STAGING_CHUNK shared the bug)
    for value in ("300000", "1", "4294967295", "4294967296", "0", "-5", " 5", "12ms",
                  "\v-18446744073709551615", " +7"):
        write("comm_timeout", value.encode())


def corpus_patch_header() -> None:
    d = os.path.join(CORPUS, "patch_header")
    os.makedirs(d, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(ROOT, "patches", "*.patch")))[:4]:
        shutil.copy(path, os.path.join(d, os.path.basename(path)))
    write("patch_header", b"From: a <a@b>\nSubject: [PATCH] x\n\nbody\n---\n--- a/x\n+++ b/x\n")
    write("patch_header", b"From 0 Mon\nSubject: y\n folded\n\ndiff --git a/p b/p\n--- /dev/null\n+++ b/p\t2\n")


if __name__ == "__main__":
    corpus_unique_id()
    corpus_bootstrap_wire()
    corpus_faults_spec()
    corpus_layers_env()
    corpus_cpu_env()
    corpus_comm_bind()
    corpus_comm_timeout()
    corpus_patch_header()
    for t in sorted(os.listdir(CORPUS)):
        print(f"{t}: {len(os.listdir(os.path.join(CORPUS, t)))} seeds")
