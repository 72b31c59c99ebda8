"""StableHLO executor of the libnrt emulator: compiles StableHLO modules with XLA's CPU backend
(through jaxlib) and runs them, on behalf of the emulator's nrt_load / nrt_execute.

The emulator (libnrt.so.1, emu_executor.c) starts this script on first use with posix_spawn, as
`$NEURON_EMU_PYTHON stablehlo_executor.py`, and talks to it through two file descriptors that
it passes in:

  fd 3  the channel: one end of a SOCK_STREAM socketpair (control messages)
  fd 4  the tensor region: a memfd that both sides map (tensor bytes), grown by the emulator
  fd 0 is /dev/null and fd 1 is the emulator's stderr, like fd 2: nothing here writes to the
  channel but the protocol, so a stray print cannot corrupt it.

Protocol. Every message, in either direction, is a 32-byte header in host byte order followed by
`len` bytes of payload:

  u32 magic  0x3158454e ("NEX1")
  u32 kind
  u64 id     a model id (0 where none)
  u64 arg    EXECUTE: bytes of the tensor region the emulator has (this side maps that many)
  u64 len    bytes of payload that follow

  executor -> emulator, once, at start:
    READY  (19)  payload: "python X, jax Y, jaxlib Z"
    ERROR  (17)  payload: why it cannot run (e.g. "cannot import jaxlib: ..."); then it exits
  emulator -> executor, each answered by OK (16), ERROR (17, payload: message) or
  BAD_INPUT (18, payload: message):
    LOAD    (1)  payload: the module, MLIR text or bytecode. OK: id = the new model's id, payload:
                 its signature, one line per tensor, the parameters of `main` then its results:
                 "in <element type> <dim>...\n" / "out <element type> <dim>...\n", element
                 types as MLIR spells them (f32, bf16, i1, ui8, ...). The module is compiled
                 here, once; the executable is kept under the id (and in the executable cache,
                 below).
    EXECUTE (2)  id, arg = the region's size; payload: one (u64 offset, u64 bytes) pair per
                 tensor, inputs then outputs, in signature order. The inputs are read from the
                 region, the module runs, the outputs are written to the region; OK has no
                 payload. BAD_INPUT when the pairs do not match the signature or XLA rejects the
                 arguments, ERROR when the execution fails otherwise.
    UNLOAD  (3)  id: the executable is dropped. OK.
  End of file on the channel (the emulator closed it, or its process ended): the executor exits.

Requests come one at a time (the emulator serialises them); tensors are dense, row-major, and i1
(bool) takes one byte per element (0 or 1).

Executable cache. XLA's executables are kept on disk so that a module another process compiled
loads in milliseconds, as a cached NEFF does on Trainium: in NEURON_EMU_XLA_CACHE (a directory;
"0" turns the cache off), by default torch-hal/neuron-emu-xla under $XDG_CACHE_HOME or
~/.cache. An entry is named by the SHA-256 of the module's bytes, the jax and jaxlib versions,
XLA's platform version and this host's CPU (XLA compiles for the CPU it runs on); it is written
to a file of its own and renamed into place, so processes filling one entry at once are safe. An
entry that does not load is compiled again and replaced; a cache that cannot be written is only
not written.

jaxlib API used (checked against jax 0.10.2 / jaxlib 0.10.2, the pinned versions; the private
parts may change in other versions):
  jaxlib.mlir.ir.Context, ir.DialectRegistry, ir.Module.parse (text and bytecode),
    ir.FunctionType, ir.RankedTensorType, ir.TypeAttr, ir.StringAttr
  jaxlib.mlir._mlir_libs._jax_mlir_ext.register_dialects(registry)  (private: func and the
    other upstream dialects, as jax's own make_ir_context registers them)
  jaxlib.mlir.dialects.stablehlo / chlo / sdy .register_dialect(context)
  jax._src.xla_bridge.get_backend("cpu")  (private) -> client;
    client.compile_and_load(module_bytes, executable_devices=xla_client.DeviceList(devices),
                            compile_options=xla_client.CompileOptions())
    -> LoadedExecutable; LoadedExecutable.execute([jax.Array, ...]) -> [jax.Array, ...]
  client.serialize_executable(LoadedExecutable) -> bytes;
    client.deserialize_executable(bytes, executable_devices=..., compile_options=...)
    -> LoadedExecutable; client.platform_version
  jax_enable_x64, so that 64-bit types stay 64-bit
  jax.sharding.SingleDeviceSharding(device); jax._src.core.ShapedArray(shape, dtype) (private)
  xla_client.batched_device_put(aval, sharding, [numpy_array], [device], committed, force_copy,
    HostBufferSemantics.ZERO_COPY) -> an array on the device made of the numpy array's bytes
"""

import hashlib
import mmap
import os
import socket
import struct
import sys
import tempfile

CHANNEL_FD, REGION_FD = 3, 4
HEADER = struct.Struct("=IIQQQ")
MAGIC = 0x3158454E
LOAD, EXECUTE, UNLOAD = 1, 2, 3
OK, ERROR, BAD_INPUT, READY = 16, 17, 18, 19
SLOT = struct.Struct("=QQ")


class Channel:
    """The control channel: whole messages over the socket."""

    def __init__(self, fd):
        """Wraps the channel's descriptor."""
        self.sock = socket.socket(fileno=fd)

    def send(self, kind, model_id=0, payload=b""):
        """Sends one message; a message text goes on one line."""
        if kind in (ERROR, BAD_INPUT):  # a message: one line, for the emulator's log
            lines = (line.strip() for line in payload.splitlines())
            payload = "; ".join(line for line in lines if line)
        if isinstance(payload, str):
            payload = payload.encode("utf-8", "replace")
        self.sock.sendall(HEADER.pack(MAGIC, kind, model_id, 0, len(payload)) + payload)

    def _recv_exact(self, n):
        """Reads exactly n bytes; EOFError once the emulator closed the channel."""
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise EOFError
            got += k
        return bytes(buf)

    def recv(self):
        """Reads one message: (kind, model id, arg, payload)."""
        magic, kind, model_id, arg, length = HEADER.unpack(self._recv_exact(HEADER.size))
        if magic != MAGIC:
            raise EOFError  # not the emulator speaking: stop
        return kind, model_id, arg, self._recv_exact(length)


class ExecutableCache:
    """Serialized XLA executables on disk, by module and toolchain (see "Executable cache")."""

    def __init__(self, directory, toolchain):
        """Entries go to ``directory``; ``toolchain`` names what compiled them."""
        self.directory = directory
        identity = hashlib.sha256(toolchain.encode() + b"\0" + _host_cpu().encode())
        self.identity = identity.hexdigest()

    @classmethod
    def from_environment(cls, toolchain):
        """The cache NEURON_EMU_XLA_CACHE names (or the default one); None when it is "0"."""
        directory = os.environ.get("NEURON_EMU_XLA_CACHE")
        if directory == "0":
            return None
        if not directory:
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
                os.path.expanduser("~"), ".cache")
            directory = os.path.join(base, "torch-hal", "neuron-emu-xla")
        return cls(directory, toolchain)

    def path(self, module):
        """The entry of ``module`` (bytes), whether or not it exists."""
        key = hashlib.sha256(self.identity.encode() + b"\0" + module).hexdigest()
        return os.path.join(self.directory, key[:2], key + ".xla")

    @staticmethod
    def store(path, serialize):
        """Writes ``serialize()`` to ``path`` through a private file and a rename; a cache that
        cannot be written (read-only, full) is left as it is."""
        try:
            data = serialize()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except Exception:  # noqa: BLE001 - a cache, not a result
            pass


def _host_cpu():
    """What XLA's CPU code depends on: the CPU model and its feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return os.uname().machine
    wanted = ("model name", "flags", "Features", "CPU part")
    first = {}
    for line in lines:
        key, _, value = line.partition(":")
        key = key.strip()
        if key in wanted and key not in first:
            first[key] = value.strip()
    return os.uname().machine + "; " + "; ".join(f"{k}: {first[k]}" for k in sorted(first))


class Executor:
    """Compiled modules by id, and the tensor region."""

    def __init__(self, jax, np, dtypes, ir, context, backend, xla_client, shaped_array):
        """Keeps what start() imported and made; runs on the backend's first CPU device."""
        self.jax, self.np, self.dtypes, self.ir = jax, np, dtypes, ir
        self.context, self.backend, self.xla_client = context, backend, xla_client
        self.shaped_array = shaped_array
        self.device = backend.local_devices()[0]
        self.sharding = jax.sharding.SingleDeviceSharding(self.device)
        self.models, self.next_id = {}, 1
        self.region, self.region_size = None, 0
        # Per model, the views of its last execution: (its request's payload, input arrays,
        # output views). A model's tensors sit at the same offsets every time (the emulator lays
        # them out in order), so an execution whose payload is the last one's reuses them, checks
        # included; remapping the region drops them all.
        self.bound = {}
        self.cache = ExecutableCache.from_environment(
            f"jax {jax.__version__}; platform {backend.platform_version}")

    def _tensor(self, usage, mlir_type, what):
        """(signature line, numpy dtype, shape) of a parameter or result of main."""
        ir = self.ir
        try:
            t = ir.RankedTensorType(mlir_type)
        except ValueError:
            raise ValueError(f"{what} is {mlir_type}, not a ranked tensor") from None
        if not t.has_static_shape:
            raise ValueError(f"{what} is {t}: dynamic shapes are not supported")
        element = str(t.element_type)
        if element not in self.dtypes:
            raise ValueError(f"{what} has element type {element}, which the emulator does not "
                             f"support ({', '.join(self.dtypes)})")
        shape = tuple(t.shape)
        line = " ".join([usage, element] + [str(d) for d in shape])
        return line, self.dtypes[element], shape

    def load(self, module):
        """Parses a module, checks @main's types and compiles it. Returns (id, signature)."""
        ir = self.ir
        with self.context:
            parsed = ir.Module.parse(module)
            main = None
            for op in parsed.body.operations:
                attrs = op.operation.attributes
                if (op.operation.name == "func.func" and "sym_name" in attrs and
                        ir.StringAttr(attrs["sym_name"]).value == "main"):
                    main = op.operation
            if main is None:
                raise ValueError("the module has no function @main")
            if ("sym_visibility" in main.attributes and
                    ir.StringAttr(main.attributes["sym_visibility"]).value != "public"):
                raise ValueError("@main is not public")
            ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
            inputs = [self._tensor("in", t, f"parameter {i} of @main")
                      for i, t in enumerate(ftype.inputs)]
            outputs = [self._tensor("out", t, f"result {i} of @main")
                       for i, t in enumerate(ftype.results)]
        executable = self._executable(module)
        model_id, self.next_id = self.next_id, self.next_id + 1
        # Made once, for every execution: each parameter's abstract value (the zero-copy puts
        # take it) and each tensor's bytes.
        avals = [self.shaped_array(shape, dtype) for _, dtype, shape in inputs]
        sizes = [int(self.np.prod(shape, dtype=self.np.int64)) * dtype.itemsize
                 for _, dtype, shape in inputs + outputs]
        self.models[model_id] = (executable, inputs, outputs, avals, sizes)
        return model_id, "".join(line + "\n" for line, _, _ in inputs + outputs)

    def unload(self, model_id):
        """Drops a model and its views (an unknown id is not an error)."""
        self.models.pop(model_id, None)
        self.bound.pop(model_id, None)

    def _executable(self, module):
        """The module compiled for the device: from the executable cache, else compiled (and
        then cached)."""
        devices = self.xla_client.DeviceList((self.device,))
        path = self.cache.path(module) if self.cache else None
        if path and os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    return self.backend.deserialize_executable(
                        f.read(), executable_devices=devices,
                        compile_options=self.xla_client.CompileOptions())
            except Exception:  # noqa: BLE001 - unreadable or stale: compiled again below
                pass
        executable = self.backend.compile_and_load(
            module, executable_devices=devices, compile_options=self.xla_client.CompileOptions())
        if path:
            self.cache.store(path, lambda: self.backend.serialize_executable(executable))
        return executable

    def _map(self, size):
        """Maps the region again once the emulator has grown it."""
        if size > self.region_size:
            # The old mapping is not closed here: it goes when nothing refers to it any more
            # (XLA may let go of an execution's zero-copy arguments a little after it ends).
            self.region, self.region_size = mmap.mmap(REGION_FD, size), size
            self.bound.clear()

    def execute(self, model_id, region_size, payload):
        """Runs a model on the region's inputs. Returns None, or (kind, message) on failure."""
        np = self.np
        if model_id not in self.models:
            return BAD_INPUT, f"no model {model_id} is loaded here"
        executable, inputs, outputs, avals, sizes = self.models[model_id]
        self._map(region_size)
        bound = self.bound.get(model_id)
        if bound is None or bound[0] != payload:  # the same layout as last time: checked then
            if len(payload) % SLOT.size or len(payload) // SLOT.size != len(sizes):
                return BAD_INPUT, (f"{len(payload) // SLOT.size} tensors given, the model has "
                                   f"{len(sizes)}")
            slots = list(SLOT.iter_unpack(payload))
            for k, ((offset, size), want) in enumerate(zip(slots, sizes)):
                if size != want or offset + size > region_size:
                    line = (inputs + outputs)[k][0]
                    return BAD_INPUT, f"'{line}' takes {want} bytes, {size} given at {offset}"
            bound = (payload, self._arguments(slots, inputs, avals),
                     self._result_views(slots[len(inputs):], outputs))
            self.bound[model_id] = bound
        _, args, views = bound
        try:
            results = executable.execute([a() if callable(a) else a for a in args])
            # The arguments may be the region's own bytes: the execution is over before the
            # region is written or mapped again (np.asarray below waits for each result).
        except Exception as e:  # XLA rejected the arguments or failed
            self.bound.pop(model_id, None)
            text = f"{type(e).__name__}: {e}"
            return (BAD_INPUT if "INVALID_ARGUMENT" in text else ERROR), text
        if any(not callable(a) and a.is_deleted() for a in args):
            self.bound.pop(model_id, None)  # XLA took a buffer for an aliased result: made anew
        for view, result in zip(views, results):
            data = np.asarray(result)
            if data.shape != view.shape or data.dtype != view.dtype:
                return ERROR, (f"a result is {data.dtype} {data.shape} where {view.dtype} "
                               f"{view.shape} is expected")
            np.copyto(view, data)  # one copy, into the region
        return None

    def _arguments(self, slots, inputs, avals):
        """The inputs as XLA buffers, or functions that make one. Each is the region's bytes
        themselves (zero copy: the region's offsets are 64-byte aligned, as XLA's CPU buffers
        must be), not a copy: a copy per input, finished on XLA's threads, cost more than the
        model's own computation for small models. Such a buffer reads whatever the region holds
        when the model runs, so it serves every execution. Booleans (one byte each, any nonzero
        byte true) are converted, a copy made for each execution by the function."""
        np, put = self.np, self.xla_client.batched_device_put
        zero_copy = self.xla_client.HostBufferSemantics.ZERO_COPY
        sharding, devices = self.sharding, [self.device]
        args = []
        for (offset, size), (_, dtype, shape), aval in zip(slots, inputs, avals):
            if dtype == np.bool_:
                view = np.frombuffer(self.region, dtype=np.uint8, count=size,
                                     offset=offset).reshape(shape)
                args.append(lambda view=view, aval=aval: put(
                    aval, sharding, [view != 0], devices, True, False, zero_copy))
            else:
                array = np.frombuffer(self.region, dtype=dtype, count=size // dtype.itemsize,
                                      offset=offset).reshape(shape)
                args.append(put(aval, sharding, [array], devices, True, False, zero_copy))
        return args

    def _result_views(self, slots, outputs):
        """Each result's place in the region (``slots``: the results' pairs), as a writable
        array of its dtype and shape."""
        np = self.np
        return [np.frombuffer(self.region, dtype=dtype, count=size // dtype.itemsize,
                              offset=offset).reshape(shape)
                for (offset, size), (_, dtype, shape) in zip(slots, outputs)]


def start():
    """Imports jaxlib and makes the executor, or returns the reason it cannot run."""
    os.environ["JAX_PLATFORMS"] = "cpu"  # the executor uses XLA's CPU backend only
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # XLA's start-up notes are not errors
    try:
        import numpy as np
        import jaxlib
        import jax
        import ml_dtypes
        from jaxlib import xla_client
        from jaxlib.mlir import ir
        from jaxlib.mlir.dialects import chlo, sdy, stablehlo
        from jaxlib.mlir._mlir_libs import _jax_mlir_ext
        from jax._src import xla_bridge
        from jax._src.core import ShapedArray
    except ImportError as e:
        return None, (f"cannot import {e.name or 'a module'}: {e} (the executor needs "
                      f"jax==0.10.2 and jaxlib==0.10.2)")
    try:
        jax.config.update("jax_enable_x64", True)
        registry = ir.DialectRegistry()
        _jax_mlir_ext.register_dialects(registry)
        context = ir.Context()
        context.append_dialect_registry(registry)
        context.load_all_available_dialects()
        for dialect in (stablehlo, chlo, sdy):
            dialect.register_dialect(context)
        backend = xla_bridge.get_backend("cpu")
    except Exception as e:
        return None, f"jax {jax.__version__} cannot start its CPU backend: {type(e).__name__}: {e}"
    dtypes = {name: np.dtype(t) for name, t in [
        ("f32", np.float32), ("f16", np.float16), ("bf16", ml_dtypes.bfloat16),
        ("f64", np.float64), ("i1", np.bool_), ("i8", np.int8), ("ui8", np.uint8),
        ("i16", np.int16), ("ui16", np.uint16), ("i32", np.int32), ("ui32", np.uint32),
        ("i64", np.int64), ("ui64", np.uint64)]}
    executor = Executor(jax, np, dtypes, ir, context, backend, xla_client, ShapedArray)
    about = (f"python {sys.version.split()[0]}, jax {jax.__version__}, "
             f"jaxlib {jaxlib.__version__}")
    return executor, about


def main():
    """Says READY (or why not), then answers requests until the channel closes."""
    sys.stdout = sys.stderr  # fd 1 is stderr already; the channel is fd 3
    channel = Channel(CHANNEL_FD)
    executor, about = start()
    if executor is None:
        channel.send(ERROR, payload=about)
        return 1
    channel.send(READY, payload=about)
    while True:
        try:
            kind, model_id, arg, payload = channel.recv()
        except (EOFError, OSError):
            return 0
        try:
            if kind == LOAD:
                new_id, signature = executor.load(payload)
                channel.send(OK, new_id, signature)
            elif kind == EXECUTE:
                failure = executor.execute(model_id, arg, payload)
                if failure is None:
                    channel.send(OK, model_id)
                else:
                    channel.send(failure[0], model_id, failure[1])
            elif kind == UNLOAD:
                executor.unload(model_id)
                channel.send(OK, model_id)
            else:
                channel.send(ERROR, model_id, f"unknown request kind {kind}")
        except Exception as e:  # a module that does not parse or compile, or a bug here
            channel.send(ERROR, model_id, f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    os._exit(main())  # no interpreter teardown: the emulator waits for this exit
