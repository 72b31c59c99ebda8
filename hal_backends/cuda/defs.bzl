"""Targets of the CUDA backend, defined only when the CUDA toolkit was found.

BUILD files cannot branch, so the branching lives in these macros.
"""

load(
    "@local_cuda//:defs.bzl",
    "CUDART_FOUND",
    "CUDA_FOUND",
    "CUDA_REASON",
    "NCCL_FOUND",
    "NCCL_LIBRARY",
    "NCCL_REASON",
    "NCCL_VERSION",
)
load("//conformance:defs.bzl", "CTS_GPU_KERNELS")
load("//tools:backend.bzl", "hal_backend_library")
load("//tools:copts.bzl", "HAL_BACKEND_COPTS")

CUDA_SRCS = [
    "cuda_backend.c",
    "cuda_device.c",
    "cuda_event.c",
    "cuda_loader.c",
    "cuda_memory.c",
    "cuda_program.c",
    "cuda_status.c",
    "cuda_stream.c",
] + (["cuda_comm.c"] if NCCL_FOUND else [])

CUDA_HDRS = ["cuda_internal.h"]

def _string_define(name, value):
    """-Dname="value" as one copt. Bazel expands make variables in copts and splits them like a
    shell, hence the $$ and the single quotes around the C string literal."""
    literal = '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')
    return ("'-D%s=%s'" % (name, literal.replace("'", "'\\''"))).replace("$", "$$")

# With NCCL headers the native collective slots are compiled in; libnccl itself is loaded at run
# time (and may be absent there: the HAL's host-staged collectives serve then). The libnccl.so.2
# beside the nccl.h built against (e.g. nvidia-nccl-cu13's, found through Python) is recorded:
# the loader tries it after $HAL_NCCL_LIBRARY, since no rpath or loader path names a wheel's lib.
CUDA_COPTS = HAL_BACKEND_COPTS + (["-DHAL_CUDA_WITH_NCCL=1"] if NCCL_FOUND else []) + ([
    _string_define("HAL_CUDA_NCCL_BUILD_LIBRARY", NCCL_LIBRARY),
] if NCCL_FOUND and NCCL_LIBRARY else [])

CUDA_DEPS = ["//hal:headers", "@local_cuda//:cuda_headers"] + (
    ["@local_cuda//:nccl_headers"] if NCCL_FOUND else []
)

def cuda_backend_targets():
    """//hal_backends/cuda: the backend library and its sources as a library for unit tests."""
    if not CUDA_FOUND:
        return

    # The backend's sources, for its own unit tests (which link them directly).
    native.cc_library(
        name = "cuda_backend_lib",
        srcs = CUDA_SRCS,
        hdrs = CUDA_HDRS,
        copts = CUDA_COPTS,
        linkopts = [
            "-ldl",
            "-pthread",
        ],
        visibility = ["//hal_backends/cuda:__subpackages__"],
        deps = CUDA_DEPS,
        alwayslink = True,
    )

    # The backend library the HAL loads (hal_backend_open("cuda")); exports only
    # hal_backend_get_ops. Links nothing of CUDA: libcudart and libnccl are loaded at run time.
    hal_backend_library(
        name = "libhal_backend_cuda.so",
        srcs = CUDA_SRCS + CUDA_HDRS,
        copts = CUDA_COPTS,
        linkopts = [
            "-ldl",
            "-pthread",
        ],
        visibility = ["//visibility:public"],
        deps = CUDA_DEPS,
    )

def cuda_skipped_test(name):
    """A test that passes and says why the CUDA targets are absent (no toolkit found)."""
    if CUDA_FOUND:
        return
    native.sh_test(
        name = name,
        size = "small",
        srcs = ["skipped.sh"],
        args = ["'the cuda backend is skipped: %s'" % CUDA_REASON],
    )

# Where the tests find the backend (runfiles-relative).
_BACKEND_ENV = {"HAL_BACKEND_PATH": "hal_backends/cuda"}

_BACKEND_DATA = ["//hal_backends/cuda:libhal_backend_cuda.so"]

# The toolkit's own libcudart, where it has one; elsewhere the backend's default search finds
# the runtime.
_CUDART_DATA = ["@local_cuda//:cudart_shared"] if CUDART_FOUND else []
_CUDART_PATH = "$(rootpath @local_cuda//:cudart_shared)" if CUDART_FOUND else ""
_CUDART_ENV = {"HAL_CUDA_LIBCUDART": _CUDART_PATH} if CUDART_FOUND else {}

# Kept out of `bazel test //...`: they need an NVIDIA GPU (conformance/gpu/run.sh runs them).
_GPU_TAGS = [
    "manual",
    "requires-gpu",
]

def _cuda_gpu_test(name, src, env, linkopts = []):
    """A test of the backend on a real GPU through the real runtime; built static so that
    conformance/gpu/bundle.sh can carry it to a machine without Bazel."""
    test_env = dict(_BACKEND_ENV)
    test_env.update(_CUDART_ENV)
    test_env.update(env)
    native.cc_test(
        name = name,
        size = "small",
        srcs = [
            src,
            "cuda_test_util.h",
        ],
        copts = CUDA_COPTS,
        data = _BACKEND_DATA + _CUDART_DATA,
        env = test_env,
        linkopts = linkopts,
        linkstatic = True,
        tags = _GPU_TAGS,
        deps = [
            "//hal",
            "//tools/ctest",
            "//tools/ctest:ctest_host",
            "//tools/ctest:ctest_status",
        ],
    )

def cuda_test_targets():
    """//hal_backends/cuda/tests: unit tests, the real runtime without a GPU, tests on a GPU."""
    if not CUDA_FOUND:
        cuda_skipped_test(name = "cuda_backend_skipped")
        return

    # Internals: status mappings, property translation, image checks (on the conformance
    # suite's cubin and fatbin, where nvcc built them). No CUDA library involved.
    native.cc_test(
        name = "cuda_unit_test",
        size = "small",
        srcs = ["cuda_unit_test.c"],
        copts = CUDA_COPTS,
        data = CTS_GPU_KERNELS,
        env = {
            "CUDA_TEST_CUBIN": "$(rootpath //conformance:cts_kernels.cubin)",
            "CUDA_TEST_FATBIN": "$(rootpath //conformance:cts_kernels.fatbin)",
        } if CTS_GPU_KERNELS else {},
        linkstatic = True,
        deps = [
            "//hal",
            "//hal_backends/cuda:cuda_backend_lib",
            "//tools/ctest",
        ],
    )

    # What cuda_configure reported for NCCL (found or not, version, recorded libnccl) is what the
    # backend library was built with: its nccl.h and the library's strings, no CUDA library.
    native.sh_test(
        name = "cuda_nccl_build_test",
        size = "small",
        srcs = ["cuda_nccl_build_test.sh"],
        data = _BACKEND_DATA + (["@local_cuda//:nccl_h"] if NCCL_FOUND else []),
        env = {
            "CUDA_TEST_BACKEND": "$(rootpath //hal_backends/cuda:libhal_backend_cuda.so)",
            "CUDA_TEST_NCCL_FOUND": "1" if NCCL_FOUND else "0",
            "CUDA_TEST_NCCL_H": "$(rootpath @local_cuda//:nccl_h)" if NCCL_FOUND else "",
            "CUDA_TEST_NCCL_LIBRARY": NCCL_LIBRARY.replace("$", "$$"),
            "CUDA_TEST_NCCL_REASON": NCCL_REASON.replace("$", "$$"),
            "CUDA_TEST_NCCL_VERSION": NCCL_VERSION,
        },
    )

    # The backend's loader finds the libnccl recorded at build time by itself (no GPU needed to
    # load NCCL and ask its version), where one was recorded.
    if NCCL_FOUND and NCCL_LIBRARY:
        native.cc_test(
            name = "cuda_nccl_load_test",
            size = "small",
            srcs = ["cuda_nccl_load_test.c"],
            copts = CUDA_COPTS,
            linkstatic = True,
            deps = [
                "//hal",
                "//hal_backends/cuda:cuda_backend_lib",
                "//tools/ctest",
            ],
        )

    # Opening the backend without a runtime, and with this machine's real runtime (which, on a
    # machine without a GPU, must say so).
    native.cc_test(
        name = "cuda_nodevice_test",
        size = "small",
        srcs = [
            "cuda_nodevice_test.c",
            "cuda_test_util.h",
        ],
        copts = CUDA_COPTS,
        data = _BACKEND_DATA + _CUDART_DATA,
        env = dict(
            _BACKEND_ENV,
            CUDA_TEST_REAL_LIBCUDART = _CUDART_PATH,
            HAL_NCCL_LIBRARY = "none",
        ),
        deps = [
            "//hal",
            "//tools/ctest",
            "//tools/ctest:ctest_status",
        ],
    )

    # GPU only. The public API: with NCCL where the backend finds it (HAL_NCCL_LIBRARY unset:
    # its default search), and without.
    _cuda_gpu_test(name = "cuda_api_test", src = "cuda_api_test.c", env = {})
    _cuda_gpu_test(
        name = "cuda_api_test_no_nccl",
        src = "cuda_api_test.c",
        env = {"HAL_NCCL_LIBRARY": "none"},
    )

    # GPU only. The backend's slots driven directly (host-function failures latching on a
    # stream, event versions).
    _cuda_gpu_test(
        name = "cuda_slot_test",
        src = "cuda_slot_test.c",
        env = {"HAL_NCCL_LIBRARY": "none"},
        linkopts = ["-ldl"],
    )
