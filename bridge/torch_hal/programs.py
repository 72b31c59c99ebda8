"""Programs and kernels of the torch_hal device (HAL 1.2): custom kernels from Python.

A :class:`Program` is code loaded on one device from an image in a named format; a
:class:`Kernel` is one of its entry points. Calling a kernel enqueues a launch on a stream of
the device (the current stream by default) without waiting for it, like a CUDA kernel launch:

    prog = torch_hal.programs.Program.from_file("my_kernels.so")   # HAL_PROGRAM_FORMAT_HOST_ELF
    add = prog.kernel("scaled_add")
    add(x, y, out, x.numel(), 2.0, grid=(8,))

Arguments are tensors on the launch's device (passed as their data pointers, checked by the HAL
against their allocations) and scalars: Python ints and floats take the size the kernel's
signature gives (without a signature, int64 and double), ``bytes`` pass as they are. Which
formats a device loads is :func:`formats`. The cpu backend loads host shared objects whose
kernels follow the host calling convention of ``hal/include/hal/hal_program.h``; the trainium
backend loads NEFF (on the libnrt emulator only its test container) and StableHLO modules
(``"stablehlo"``, MLIR text or bytecode: compiled with neuronx-cc where it is installed, executed
with XLA's CPU compiler by the libnrt emulator). A StableHLO program's kernel is ``main``; it takes
the module's parameters, then its results, as contiguous tensors of the module's dtypes and
shapes (checked by the HAL), and a result the module declares must-alias is passed its
parameter's tensor::

    prog = torch_hal.programs.Program(module_text.encode(), "stablehlo")
    prog.kernel("main")(x, y, out)                # out = f(x, y), enqueued

Tensors used by a launch must stay alive until the launch ran, as with any stream work: on the
current stream the caching allocator sees to it; on another stream call
``tensor.record_stream(stream)``.
"""

import os

from . import _C
from ._utils import _get_device_index

__all__ = ["FORMATS", "Program", "Kernel", "formats"]

# hal_program_format_t values (hal/include/hal/hal_program.h).
FORMATS = {"host_elf": 1, "ptx": 2, "cubin": 3, "fatbin": 4, "neff": 5, "stablehlo": 6}

_SUFFIXES = {".so": "host_elf", ".ptx": "ptx", ".cubin": "cubin", ".fatbin": "fatbin",
             ".neff": "neff", ".mlir": "stablehlo", ".mlirbc": "stablehlo"}


def formats(device=None):
    """The names of the program formats a device loads (empty when it loads none)."""
    index = _get_device_index(device, optional=True)
    mask = _C._device_properties(index)["program_formats"]
    return [name for name, value in FORMATS.items() if mask & (1 << value)]


def _format_value(format):
    if format not in FORMATS:
        raise ValueError(f"unknown program format {format!r}; known: {', '.join(FORMATS)}")
    return FORMATS[format]


class Program:
    """Code loaded on a device.

    Args:
        image: the image's bytes (copied during the call).
        format: one of :data:`FORMATS` (default "host_elf").
        device: the device (default: the current device).

    Raises RuntimeError naming the backend and the failed call for an image the device refuses
    (an unknown format, a corrupt image).
    """

    def __init__(self, image, format="host_elf", device=None):
        self._handle = None
        self.device_index = _get_device_index(device, optional=True)
        self.format = format
        self._handle = _C._program_create(self.device_index, _format_value(format), bytes(image))
        self._kernels = {}

    @classmethod
    def from_file(cls, path, format=None, device=None):
        """Loads a program from a file; the format defaults to what the suffix says."""
        if format is None:
            suffix = os.path.splitext(path)[1]
            if suffix not in _SUFFIXES:
                raise ValueError(f"cannot tell the program format of {path!r} from its suffix; "
                                 f"pass format= (one of {', '.join(FORMATS)})")
            format = _SUFFIXES[suffix]
        with open(path, "rb") as f:
            return cls(f.read(), format=format, device=device)

    def kernel(self, name):
        """The kernel `name` (the same object for the same name)."""
        self._check_open()
        if name not in self._kernels:
            self._kernels[name] = Kernel(self, name, _C._program_get_kernel(self._handle, name))
        return self._kernels[name]

    def close(self):
        """Destroys the program; launches already queued still run. Idempotent."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            for k in self._kernels.values():
                k._handle = None
            _C._program_destroy(handle)

    def _check_open(self):
        if self._handle is None:
            raise RuntimeError("the program was closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown, or a backend already closed
            pass

    def __repr__(self):
        state = "closed" if self._handle is None else f"device {self.device_index}"
        return f"<torch_hal.programs.Program {self.format} on {state}>"


class Kernel:
    """An entry point of a :class:`Program`; call it to launch it."""

    def __init__(self, program, name, handle):
        self.program = program  # keeps the program alive while the kernel is
        self.name = name
        self._handle = handle
        self.signature = _C._kernel_signature(handle)
        # (ninputs, noutputs, [(dtype name, shape)], aliases) for a kernel taking tensors.
        self.tensor_info = _C._kernel_tensor_info(handle)

    def __call__(self, *args, grid=(1,), block=(1,), shared_bytes=0, stream=None):
        """Enqueues a launch with `args` over `grid` blocks on `stream` (default: current)."""
        if self._handle is None:
            raise RuntimeError(f"kernel {self.name!r}: its program was closed")
        if stream is not None and stream.device_index != self.program.device_index:
            raise ValueError(f"kernel {self.name!r} is loaded on device "
                             f"{self.program.device_index}, the stream is on device "
                             f"{stream.device_index}")
        stream_id = -1 if stream is None else stream.stream_id
        _C._kernel_launch(self._handle, self.program.device_index, stream_id, tuple(grid),
                          tuple(block), int(shared_bytes), list(args))

    launch = __call__

    def __repr__(self):
        return f"<torch_hal.programs.Kernel {self.name!r} signature={self.signature}>"
