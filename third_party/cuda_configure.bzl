"""Repository rule that finds the CUDA toolkit and NCCL on the build machine.

Generates a repository (named in the WORKSPACE, `@local_cuda`) with

  BUILD      cc_library targets for what was found:
               :cuda_headers  the toolkit's include/ (cuda_runtime_api.h and friends)
               :cudart        libcudart.so, for programs that link the runtime themselves
               :cudart_shared the same file, for tests that load it with dlopen
               :nccl_headers  nccl.h (and the CUDA headers it includes)
               :nccl_h        nccl.h alone, as a file (tests read its version)
               :nccl          libnccl.so.2
  defs.bzl   CUDA_FOUND, CUDA_VERSION, CUDA_REASON, CUDART_FOUND, NCCL_FOUND, NCCL_VERSION,
             NCCL_REASON, so that BUILD files define CUDA targets only when the toolkit is there;
             NCCL_INCLUDE (the directory of the nccl.h used), NCCL_SOURCE (what led there, for
             messages), NCCL_LIBRARY (the libnccl.so.2 beside that nccl.h, "" without one: the
             backend tries it at run time, see hal_backends/cuda/README.md);
             NVCC, the toolkit's nvcc ("" without one), for device code built at build time
             (the conformance suite's PTX, cubin and fatbin kernels).

The CUDA backend itself only needs the headers: it loads libcudart and libnccl with dlopen at run
time (see hal_backends/cuda/README.md). Nothing is downloaded.

Where nccl.h is looked for, the first hit wins:
  1. HAL_NCCL_PATH when set: only there ("none": build without NCCL).
  2. The toolkit root (include/nccl.h).
  3. The `nvidia.nccl` package (PyPI's nvidia-nccl-cu13, which torch's CUDA 13 wheels depend
     on) of each Python interpreter found: `python3` on PATH, then the repository's own virtual
     environments, out/venv-*/bin/python (e.g. `make test-bridge-next`'s), in name order. Each
     is asked with a short script that imports nothing but the `nvidia` namespace (not torch).
None found is fine: the backend is then built without native collectives, and says why.

The rule reports what it chose when it runs (a DEBUG line: NCCL's version from nccl.h, its path,
and how it was found, or why there is none).

Environment (a change re-runs the rule):
  HAL_CUDA_PATH  toolkit root; default /usr/local/cuda. Needs include/cuda_runtime_api.h.
  HAL_NCCL_PATH  NCCL root: a directory with include/nccl.h (and lib/libnccl.so.2), or the
                 extracted nvidia-nccl-cu13 wheel (nvidia/nccl/include/nccl.h below it), or
                 "none". Unset: the search above.
  PATH           which `python3` is asked.
The rule also re-runs at every Bazel server start (local); after installing or removing a
Python package in a running server, `bazel sync --only=local_cuda` re-runs it.
"""

_DEFAULT_CUDA_PATH = "/usr/local/cuda"

def _parse_define(text, name):
    """Returns the value of `#define name value` in text, or None."""
    for line in text.splitlines():
        parts = [p for p in line.strip().replace("\t", " ").split(" ") if p]
        if len(parts) >= 3 and parts[0] == "#define" and parts[1] == name:
            return parts[2]
    return None

def _first_lib(ctx, root, names):
    """Returns the first of root/{lib64,lib}/name that exists, as a path string, or None."""
    for d in ["lib64", "lib", "targets/x86_64-linux/lib"]:
        for n in names:
            p = ctx.path(root + "/" + d + "/" + n)
            if p.exists:
                return str(p)
    return None

# Run by each Python interpreter: prints the nvidia.nccl package directory that has
# include/nccl.h. find_spec imports only the parent `nvidia`, a namespace package (no code runs,
# torch is never imported); a namespace package may have several directories, hence the loop.
_PY_FIND_NCCL = """
import importlib.util, os
try:
    spec = importlib.util.find_spec("nvidia.nccl")
except Exception:
    spec = None
for d in (spec.submodule_search_locations or []) if spec else []:
    if os.path.isfile(os.path.join(d, "include", "nccl.h")):
        print(d)
        break
"""

def _pythons(ctx):
    """The interpreters asked for nvidia.nccl: python3 on PATH, then out/venv-*/bin/python."""
    found = []
    python3 = ctx.which("python3")
    if python3:
        found.append(str(python3))

    # Bazel 4.2.3 has no repository_ctx.workspace_root: a label of the main repository gives it.
    out = ctx.path(Label("//:WORKSPACE")).dirname.get_child("out")
    if out.exists:
        for venv in sorted([str(p) for p in out.readdir()]):
            python = ctx.path(venv + "/bin/python")
            if venv.split("/")[-1].startswith("venv-") and python.exists:
                if str(python) not in found:
                    found.append(str(python))
    return found

def _python_nccl(ctx, python):
    """The nvidia.nccl package directory of an interpreter, or None."""
    result = ctx.execute([python, "-c", _PY_FIND_NCCL], timeout = 30, quiet = True)
    root = result.stdout.strip() if result.return_code == 0 else ""
    if root and ctx.path(root + "/include/nccl.h").exists:
        return root
    return None

def _find_nccl(ctx, nccl_env, cuda_root):
    """Returns (root, source, reason): the directory with include/nccl.h and how it was found,
    or None, "" and why none was. Looks in the order the module docstring gives."""
    if nccl_env == "none":
        return None, "", "HAL_NCCL_PATH=none"
    if nccl_env:
        for root in [nccl_env, nccl_env + "/nvidia/nccl"]:
            if ctx.path(root + "/include/nccl.h").exists:
                return root, "HAL_NCCL_PATH", ""
        return None, "", ("HAL_NCCL_PATH=%s holds neither include/nccl.h nor " +
                          "nvidia/nccl/include/nccl.h") % nccl_env
    if ctx.path(cuda_root + "/include/nccl.h").exists:
        return cuda_root, "the CUDA toolkit", ""
    pythons = _pythons(ctx)
    for python in pythons:
        root = _python_nccl(ctx, python)
        if root:
            return root, "the nvidia.nccl package of " + python, ""
    return None, "", (("no nccl.h in the CUDA toolkit (%s) and no nvidia.nccl package " +
                       "(nvidia-nccl-cu13) for %s; install that package or set HAL_NCCL_PATH " +
                       "to an NCCL root or an extracted nvidia-nccl-cu13 wheel to build native " +
                       "collectives") % (
        cuda_root,
        " or ".join(pythons) if pythons else "any Python interpreter (none found)",
    ))

def _cuda_configure_impl(ctx):
    cuda_env = ctx.os.environ.get("HAL_CUDA_PATH", "")
    cuda_root = cuda_env if cuda_env else _DEFAULT_CUDA_PATH
    nccl_env = ctx.os.environ.get("HAL_NCCL_PATH", "")

    cuda_found = False
    cuda_version = ""
    cuda_reason = ""
    runtime_h = ctx.path(cuda_root + "/include/cuda_runtime_api.h")
    if not ctx.path(cuda_root).exists:
        cuda_reason = "no CUDA toolkit at %s%s" % (
            cuda_root,
            "" if cuda_env else " (the default; set HAL_CUDA_PATH to another toolkit root)",
        )
    elif not runtime_h.exists:
        cuda_reason = "%s has no include/cuda_runtime_api.h" % cuda_root
    else:
        code = _parse_define(ctx.read(runtime_h), "CUDART_VERSION")
        if code == None or not code.isdigit():
            cuda_reason = "cannot read CUDART_VERSION from %s" % runtime_h
        elif int(code) < 12000:
            cuda_reason = "CUDA %d.%d at %s is too old (12.0 or later is needed)" % (
                int(code) // 1000,
                (int(code) % 1000) // 10,
                cuda_root,
            )
        else:
            cuda_found = True
            cuda_version = "%d.%d" % (int(code) // 1000, (int(code) % 1000) // 10)

    nvcc = ""
    if cuda_found and ctx.path(cuda_root + "/bin/nvcc").exists:
        nvcc = str(ctx.path(cuda_root + "/bin/nvcc"))

    build = ['package(default_visibility = ["//visibility:public"])', ""]
    cudart_found = False
    nccl_found = False
    nccl_version = ""
    nccl_reason = ""
    nccl_source = ""
    nccl_include = ""
    nccl_library = ""
    if cuda_found:
        ctx.symlink(cuda_root + "/include", "cuda/include")

        # Every header: nccl.h and cuda_runtime.h reach extensionless ones (<nv/target>).
        build.append("""cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda/include/**"]),
    includes = ["cuda/include"],
)
""")
        cudart = _first_lib(ctx, cuda_root, ["libcudart.so"])
        if cudart:
            cudart_found = True
            ctx.symlink(cudart, "cuda/lib/libcudart.so")
            build.append("""cc_library(
    name = "cudart",
    srcs = ["cuda/lib/libcudart.so"],
    deps = [":cuda_headers"],
)

# The runtime as a file, for tests that load it with dlopen.
filegroup(
    name = "cudart_shared",
    srcs = ["cuda/lib/libcudart.so"],
)
""")
        nccl_root, nccl_source, nccl_reason = _find_nccl(ctx, nccl_env, cuda_root)
        if nccl_root:
            nccl_include = nccl_root + "/include"
            text = ctx.read(nccl_include + "/nccl.h")
            major = _parse_define(text, "NCCL_MAJOR")
            minor = _parse_define(text, "NCCL_MINOR")
            patch = _parse_define(text, "NCCL_PATCH")
            if major and minor and patch:
                nccl_found = True
                nccl_version = "%s.%s.%s" % (major, minor, patch)
                ctx.symlink(nccl_include, "nccl/include")
                build.append("""cc_library(
    name = "nccl_headers",
    hdrs = glob(["nccl/include/**"]),
    includes = ["nccl/include"],
    deps = [":cuda_headers"],
)

# nccl.h as a file, for tests that compare its version with NCCL_VERSION.
filegroup(
    name = "nccl_h",
    srcs = ["nccl/include/nccl.h"],
)
""")

                # The SONAME first: it is what the backend's dlopen would name.
                nccl_library = _first_lib(ctx, nccl_root, ["libnccl.so.2", "libnccl.so"]) or ""
                libnccl = _first_lib(ctx, nccl_root, ["libnccl.so", "libnccl.so.2"])
                if libnccl:
                    ctx.symlink(libnccl, "nccl/lib/libnccl.so")
                    build.append("""cc_library(
    name = "nccl",
    srcs = ["nccl/lib/libnccl.so"],
    deps = [":nccl_headers"],
)
""")
            else:
                nccl_include = ""
                nccl_reason = "cannot read the NCCL version from %s/include/nccl.h" % nccl_root

    ctx.file("BUILD", "\n".join(build))
    ctx.file("defs.bzl", """# Generated by //third_party:cuda_configure.bzl; do not edit.
CUDA_FOUND = %s
CUDA_VERSION = %r
CUDA_REASON = %r
CUDART_FOUND = %s
NCCL_FOUND = %s
NCCL_VERSION = %r
NCCL_REASON = %r
NCCL_INCLUDE = %r
NCCL_SOURCE = %r
NCCL_LIBRARY = %r
NVCC = %r
""" % (
        cuda_found,
        cuda_version,
        cuda_reason,
        cudart_found,
        nccl_found,
        nccl_version,
        nccl_reason,
        nccl_include,
        nccl_source,
        nccl_library,
        nvcc,
    ))

    if not cuda_found:
        print("torch-hal: the cuda backend is skipped: %s" % cuda_reason)
    elif not nccl_found:
        print(("torch-hal: the cuda backend (CUDA %s) is built without NCCL: %s. " +
               "Its collectives are the HAL's host-staged ones.") % (cuda_version, nccl_reason))
    else:
        # The run-time order is the backend loader's (hal_backends/cuda/cuda_loader.c).
        print(("torch-hal: the cuda backend (CUDA %s) is built with NCCL %s: %s/nccl.h, from %s. " +
               "At run time it loads $HAL_NCCL_LIBRARY, else %slibnccl.so.2 on the loader's " +
               "path.") % (
            cuda_version,
            nccl_version,
            nccl_include,
            nccl_source,
            nccl_library + ", else " if nccl_library else "",
        ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    # PATH: which python3 is asked for nvidia.nccl.
    environ = ["HAL_CUDA_PATH", "HAL_NCCL_PATH", "PATH"],
    # Re-run on every Bazel server start, so a toolkit installed later is found.
    local = True,
)
