"""hal_conformance_test: one conformance configuration (a backend, its layers) as a test.

Every configuration the project runs is declared in //conformance:BUILD with this macro, so a new
backend or layer adds one line there.
"""

load("//tools:nvcc.bzl", "NVCC_FOUND", "nvcc_image")

# Sharded (GoogleTest's sharding, applied before the areas' child processes start) so that no
# shard comes near its timeout under ThreadSanitizer on two loaded cores.
CONFORMANCE_SHARDS = 4

# The program area's kernels as GPU images, built with the toolkit's nvcc where there is one:
# PTX for compute_75 (JIT-compiled for any device CUDA 13 supports), a cubin for sm_90 (H100,
# H200), a fatbin with both.
_GPU_KERNEL_IMAGES = {
    "ptx": "-ptx -arch=compute_75",
    "cubin": "-cubin -arch=sm_90",
    "fatbin": "-fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75",
}

CTS_GPU_KERNELS = [
    "//conformance:cts_kernels.%s" % ext
    for ext in _GPU_KERNEL_IMAGES
] if NVCC_FOUND else []

def cts_gpu_kernel_images():
    """//conformance:cts_kernels.{ptx,cubin,fatbin} from fixtures/kernels.cu (with nvcc only)."""
    for ext, flags in _GPU_KERNEL_IMAGES.items():
        nvcc_image(
            name = "cts_kernels_" + ext,
            src = "fixtures/kernels.cu",
            out = "cts_kernels." + ext,
            flags = flags,
        )

_FIXTURE_LIBS = [
    "//conformance:libcts_%s.so" % f
    for f in ("noentry", "badmajor", "entryfail", "initfail", "kernels")
] + CTS_GPU_KERNELS

def _package_of(label):
    return label[2:].split(":")[0]

def hal_conformance_test(
        name,
        backend,
        libs,
        layers = [],
        env = {},
        script = "//conformance:run_conformance.sh",
        data = [],
        shard_count = CONFORMANCE_SHARDS,
        **kwargs):
    """The suite (//conformance:hal_conformance) on one backend.

    Args:
      name: the test's name.
      backend: what the suite opens (--backend=...): a backend name found on HAL_BACKEND_PATH.
      libs: the backend library (first) and anything it loads, as labels; HAL_BACKEND_PATH is
        the first one's package.
      layers: HAL_LAYERS for the run, e.g. ["validation"].
      env: further environment variables (a runtime to load, devices to use).
      script: the wrapper that runs the suite: it receives the suite's path and --backend=...,
        and execs them (after preparing what the backend needs, or checking what the run left).
      data: further runfiles of the wrapper.
      shard_count: shards of the test; 1 for a wrapper that needs the whole run at once.
      **kwargs: passed to sh_test (size, timeout, tags, ...).
    """
    test_env = {"HAL_BACKEND_PATH": _package_of(libs[0])}
    if layers:
        test_env["HAL_LAYERS"] = ",".join(layers)
    test_env.update(env)
    kwargs.setdefault("size", "medium")
    kwargs.setdefault("timeout", "long")
    native.sh_test(
        name = name,
        srcs = [script],
        args = [
            "$(location //conformance:hal_conformance)",
            "--backend=" + backend,
        ],
        data = ["//conformance:hal_conformance"] + _FIXTURE_LIBS + libs + data,
        env = test_env,
        shard_count = shard_count if shard_count > 1 else None,
        **kwargs
    )
