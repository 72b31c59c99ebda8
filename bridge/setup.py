"""Builds torch_hal: the HAL libraries with Bazel, then the C++ extension against the installed torch.

    pip install --no-build-isolation ./bridge        # or: pip install --no-build-isolation -e ./bridge

Steps (all in the build_ext command, so plain installs, editable installs and
`python setup.py build_ext --inplace` behave the same):
  1. `bazel build` the HAL (libhal.so.1) and every backend library of this checkout, skipping the
     targets that do not exist in it, and copy the results into torch_hal/lib/ (with the link
     libhal.so -> libhal.so.1 that the linker looks for).
  2. Compile torch_hal._C (csrc/**.cpp) against the installed torch and link it with libhal,
     found at run time (by its SONAME, libhal.so.1) through the rpath $ORIGIN/lib. The HAL then
     finds the backend libraries next to itself.

Environment:
  TORCH_HAL_BAZEL         Bazel command (default "bazel").
  TORCH_HAL_PREBUILT_LIBS a directory holding libhal.so.1 and backend libraries built elsewhere;
                          Bazel is not run.
  TORCH_HAL_DEBUG=1       build the extension with -O0 -g.
"""

import glob
import os
import shutil
import subprocess
import sys

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PACKAGE_LIB = os.path.join(HERE, "torch_hal", "lib")
# The public HAL headers, shipped for kernels built against an installed torch_hal (the
# entry points torch.compile generates, custom kernels: torch_hal.programs.include_dir()).
HAL_HEADERS = os.path.join(REPO, "hal", "include", "hal")
PACKAGE_INCLUDE = os.path.join(HERE, "torch_hal", "include")

# Bazel target -> file name in torch_hal/lib. libhal.so.1 is required; the others are optional.
BAZEL_TARGETS = [
    ("//hal:libhal.so.1", "libhal.so.1"),
    ("//hal_backends/cpu:libhal_backend_cpu.so", "libhal_backend_cpu.so"),
    ("//hal_backends/trainium:libhal_backend_trainium.so", "libhal_backend_trainium.so"),
    ("//hal_backends/trainium/emulator:libnrt.so.1", "libnrt.so.1"),
]
REQUIRED = {"libhal.so.1"}
# Source files shipped beside a built library: the libnrt emulator's StableHLO executor, which the
# emulator finds next to itself and starts in a process of its own.
COMPANIONS = {"libnrt.so.1": ("stablehlo_executor.py",
                              os.path.join(REPO, "hal_backends", "trainium", "emulator",
                                           "stablehlo_executor.py"))}
# The name the linker looks for (-lhal): a link to the library, as distributions install it.
LINK_NAME = ("libhal.so", "libhal.so.1")


def _log(msg):
    print(f"torch_hal setup: {msg}", file=sys.stderr)


def _existing_targets(bazel):
    """Returns the targets of BAZEL_TARGETS that this checkout defines."""
    labels = " ".join(t for t, _ in BAZEL_TARGETS)
    # --keep_going prints the targets that exist and reports the others as errors (exit 3).
    proc = subprocess.run([bazel, "query", "--keep_going", f"set({labels})"], cwd=REPO,
                          capture_output=True, text=True)
    found = {line.strip() for line in proc.stdout.splitlines() if line.strip()}
    return [t for t, _ in BAZEL_TARGETS if t in found]


def _bazel_build():
    """Builds the HAL libraries and returns {file name: path of the built file}."""
    bazel = os.environ.get("TORCH_HAL_BAZEL", "bazel")
    targets = _existing_targets(bazel)
    for target, name in BAZEL_TARGETS:
        if target not in targets:
            if name in REQUIRED:
                raise RuntimeError(f"{target} is not defined in {REPO}; cannot build torch_hal")
            _log(f"skipping {target} (not defined in this checkout)")
    subprocess.run([bazel, "build", *targets], cwd=REPO, check=True)
    bin_dir = subprocess.run([bazel, "info", "bazel-bin"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.strip()
    built = {}
    for target, name in BAZEL_TARGETS:
        if target in targets:
            package, _, file = target[2:].partition(":")
            built[name] = os.path.join(bin_dir, package, file)
    return _with_companions(built)


def _with_companions(built, directory=None):
    """Adds the files shipped beside the libraries in `built` (from `directory` when given)."""
    for library, (name, source) in COMPANIONS.items():
        path = os.path.join(directory, name) if directory else source
        if library in built and os.path.exists(path):
            built[name] = path
    return built


def _prebuilt(directory):
    built = {}
    for _, name in BAZEL_TARGETS:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            built[name] = path
    missing = REQUIRED - set(built)
    if missing:
        raise RuntimeError(f"TORCH_HAL_PREBUILT_LIBS={directory} lacks {sorted(missing)}")
    return _with_companions(built, directory)


def _install_libs(built, destination):
    os.makedirs(destination, exist_ok=True)
    for name in os.listdir(destination):  # drop libraries of targets that no longer exist
        if name not in built:
            os.remove(os.path.join(destination, name))
    link, target_name = LINK_NAME
    os.symlink(target_name, os.path.join(destination, link))
    for name, path in built.items():
        target = os.path.join(destination, name)
        if os.path.exists(target):
            os.remove(target)  # Bazel outputs are read-only, so copies are too
        shutil.copyfile(path, target)
        # The HAL refuses backend libraries in world-writable places; keep them 0755.
        os.chmod(target, 0o755 if not name.endswith(".py") else 0o644)


def _install_headers(destination):
    target = os.path.join(destination, "hal")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(HAL_HEADERS, target)


class BuildWithHal(BuildExtension):
    def finalize_options(self):
        super().finalize_options()
        # Objects built against one torch release are never reused with another (the bridge
        # builds against 2.13.0 and 2.14.1): a build directory per torch version, and the
        # extension always relinked (ninja still skips objects that are up to date).
        self.build_temp = os.path.join(self.build_temp, f"torch-{torch.__version__}")
        self.force = True

    def run(self):
        prebuilt = os.environ.get("TORCH_HAL_PREBUILT_LIBS")
        built = _prebuilt(prebuilt) if prebuilt else _bazel_build()
        _install_libs(built, PACKAGE_LIB)  # the extension links against this copy
        _install_headers(PACKAGE_INCLUDE)
        if not self.inplace:  # build_py ran already: put the libraries into the wheel too
            _install_libs(built, os.path.join(self.build_lib, "torch_hal", "lib"))
            _install_headers(os.path.join(self.build_lib, "torch_hal", "include"))
        super().run()


def _cxx_standard():
    """C++17, or C++20 for torch 2.14 and later, whose headers require it (ATen.h: "C++20 or
    later compatible compiler is required to use ATen")."""
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    return "-std=c++20" if (major, minor) >= (2, 14) else "-std=c++17"


def _extension():
    sources = sorted(glob.glob(os.path.join("csrc", "**", "*.cpp"), recursive=True))
    debug = os.environ.get("TORCH_HAL_DEBUG") == "1"
    cxx_flags = [
        _cxx_standard(),
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fvisibility=hidden",
        "-O0" if debug else "-O2",
        "-g" if debug else "-g0",
    ]
    ext = CppExtension(
        name="torch_hal._C",
        sources=sources,
        include_dirs=[os.path.join(HERE, "csrc"), os.path.join(REPO, "hal", "include")],
        library_dirs=[PACKAGE_LIB],
        libraries=["hal"],
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
    )
    # torch's headers are not ours to keep warning-free under -Werror: include them as system
    # headers instead of the -I that CppExtension uses.
    torch_includes = set(include_paths())
    ext.include_dirs = [d for d in ext.include_dirs if d not in torch_includes]
    for path in include_paths():
        cxx_flags += ["-isystem", path]
    # torch.profiler's device rows (csrc/runtime/KinetoProfiler.cpp): libkineto's interfaces,
    # shipped with the wheel, whose registration macro exists only with USE_KINETO.
    cxx_flags += ["-isystem", os.path.join(include_paths()[0], "kineto"), "-DUSE_KINETO"]
    return ext


setup(ext_modules=[_extension()], cmdclass={"build_ext": BuildWithHal})
