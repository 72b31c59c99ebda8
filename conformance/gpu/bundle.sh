#!/usr/bin/env bash
# Builds, with Bazel, what conformance/gpu/run.sh runs on a GPU machine that has neither Bazel
# nor GoogleTest, and puts it in out/gpu-bundle (git-ignored; it travels to that machine as a
# carried path):
#
#   bin/hal_conformance, bin/hal_bench      the conformance harness, the benchmarks (with the
#                                           launch part's kernels, bench_kernels.ptx)
#   bin/cuda_api_test, bin/cuda_slot_test   the cuda backend's own tests that need a GPU
#   backends/libhal_backend_{cuda,cpu}.so   the backends (HAL_BACKEND_PATH)
#   fixtures/libcts_*.so, cts_kernels.*     the loader fixtures and the program area's kernels
#                                           (PTX, cubin, fatbin built by nvcc) (HAL_CTS_FIXTURE_DIR)
#   fixtures/cts_triton_add.{cubin,launch}  a Triton kernel compiled for sm_90 ahead of time
#                                           (tools/triton_aot.py), launched by program.triton_cubin
#   python/torch_hal                        the PyTorch bridge, built against this machine's torch
#                                           (run.sh's torch.compile step; the GPU machine needs
#                                           the same torch and the triton package)
#   fallback-lib/                           this machine's libstdc++ and libgcc_s, used only where
#                                           the GPU machine's are older
#   MANIFEST.txt                            commit, CUDA and NCCL header versions, checksums
#
# The cuda backend is built with NCCL (its headers; the library is loaded at run time on the GPU
# machine, see run.sh): the one //third_party:cuda_configure.bzl finds by itself (HAL_NCCL_PATH,
# the toolkit, the nvidia.nccl package of python3 or of out/venv-*/bin/python), else the headers
# of the nvidia-nccl-cu13 wheel on PyPI, fetched into out/nccl-headers. Without any, the bundle
# is not made: HAL_NCCL_PATH=none makes one without native collectives on purpose.
#
# Usage: bash conformance/gpu/bundle.sh   (or make gpu-bundle)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
BAZEL=${BAZEL:-bazel}
DEST="$REPO/out/gpu-bundle"
NCCL_DIR="$REPO/out/nccl-headers"
EXTERNAL="$("$BAZEL" info output_base 2>/dev/null)/external/local_cuda"
# The string the cuda backend has only when its NCCL code is compiled in (cuda_loader.c).
NCCL_LOADER_MSG="cannot load NCCL (libnccl.so.2)"

log() { echo "gpu-bundle: $*"; }
die() {
    log "$*"
    exit 1
}
# A value of the configuration cuda_configure generated (@local_cuda//:defs.bzl), unquoted.
cuda_def() {
    sed -n "s/^$1 = \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$EXTERNAL/defs.bzl" 2>/dev/null || true
}

if [ -z "${HAL_NCCL_PATH:-}" ]; then
    # Runs cuda_configure where this Bazel server has not yet (analysis only, nothing is built).
    "$BAZEL" build --nobuild //hal_backends/cuda/... >/dev/null
fi
if [ -z "${HAL_NCCL_PATH:-}" ] && [ "$(cuda_def NCCL_FOUND)" != True ]; then
    log "cuda_configure found no NCCL: $(cuda_def NCCL_REASON)"
    if [ ! -e "$NCCL_DIR/nvidia/nccl/include/nccl.h" ]; then
        log "fetching NCCL's headers (the nvidia-nccl-cu13 wheel) into out/nccl-headers"
        tmp=$(mktemp -d)
        if python3 -m pip download --no-deps --only-binary=:all: --quiet -d "$tmp" \
            nvidia-nccl-cu13 && command -v unzip >/dev/null; then
            mkdir -p "$NCCL_DIR"
            unzip -q -o "$tmp"/nvidia_nccl_cu13-*.whl 'nvidia/nccl/include/*' '*/METADATA' \
                -d "$NCCL_DIR"
        else
            log "could not fetch them (pip or unzip failed)"
        fi
        rm -rf "$tmp"
    fi
    [ -e "$NCCL_DIR/nvidia/nccl/include/nccl.h" ] || die "no NCCL headers: install" \
        "nvidia-nccl-cu13 for python3 or set HAL_NCCL_PATH (HAL_NCCL_PATH=none: a bundle" \
        "without native collectives)"
    export HAL_NCCL_PATH="$NCCL_DIR"
fi
log "HAL_NCCL_PATH=${HAL_NCCL_PATH:-(unset: what cuda_configure found)}"

FIXTURES=(noentry badmajor entryfail initfail kernels)
GPU_KERNELS=(ptx cubin fatbin)
TARGETS=(
    //conformance:hal_conformance
    //bench:hal_bench
    //bench:bench_kernels.ptx
    //hal_backends/cpu:libhal_backend_cpu.so
    //hal_backends/cuda:libhal_backend_cuda.so
)
# Manual targets (they need a GPU), hence named here; linked statically, so they run without
# Bazel's runfiles.
CUDA_TESTS=(cuda_api_test cuda_slot_test)
for t in "${CUDA_TESTS[@]}"; do TARGETS+=("//hal_backends/cuda/tests:$t"); done
for f in "${FIXTURES[@]}"; do TARGETS+=("//conformance:libcts_$f.so"); done
for k in "${GPU_KERNELS[@]}"; do TARGETS+=("//conformance:cts_kernels.$k"); done
log "bazel build ${TARGETS[*]}"
"$BAZEL" build "${TARGETS[@]}"
BIN=$("$BAZEL" info bazel-bin 2>/dev/null)
# The backend must have the NCCL code path unless a bundle without NCCL was asked for.
if grep -qaF "$NCCL_LOADER_MSG" "$BIN/hal_backends/cuda/libhal_backend_cuda.so"; then
    log "the cuda backend is built with NCCL $(cuda_def NCCL_VERSION): $(cuda_def NCCL_INCLUDE)" \
        "(from $(cuda_def NCCL_SOURCE))"
elif [ "${HAL_NCCL_PATH:-}" = none ]; then
    log "the cuda backend is built without NCCL (HAL_NCCL_PATH=none)"
else
    die "the cuda backend was built without NCCL: $(cuda_def NCCL_REASON)"
fi

rm -rf "$DEST"
mkdir -p "$DEST"/{bin,backends,fixtures,fallback-lib}
put() { # put SRC DEST_DIR: a stripped copy
    install -m 0755 "$1" "$2/"
    strip --strip-debug "$2/$(basename "$1")"
}
put "$BIN/conformance/hal_conformance" "$DEST/bin"
put "$BIN/bench/hal_bench" "$DEST/bin"
install -m 0644 "$BIN/bench/bench_kernels.ptx" "$DEST/bin/"
put "$BIN/hal_backends/cpu/libhal_backend_cpu.so" "$DEST/backends"
put "$BIN/hal_backends/cuda/libhal_backend_cuda.so" "$DEST/backends"
for t in "${CUDA_TESTS[@]}"; do put "$BIN/hal_backends/cuda/tests/$t" "$DEST/bin"; done
for f in "${FIXTURES[@]}"; do put "$BIN/conformance/libcts_$f.so" "$DEST/fixtures"; done
for k in "${GPU_KERNELS[@]}"; do
    install -m 0644 "$BIN/conformance/cts_kernels.$k" "$DEST/fixtures/"
done
# The program area's Triton kernel, compiled ahead of time for sm_90 with the triton package
# (installed with pip where it is missing; no GPU is needed to compile).
if ! python3 -c 'import triton' 2>/dev/null; then
    log "installing the triton package (pip) to compile the Triton fixture"
    python3 -m pip install -q triton
fi
TRITON_CACHE_DIR="$REPO/out/triton-cache" python3 tools/triton_aot.py --arch 90 \
    --out "$DEST/fixtures" conformance/fixtures/triton_kernels.py
# The PyTorch bridge for run.sh's torch.compile step, built in place against this machine's
# torch (its HAL libraries from the Bazel outputs; the cuda backend comes from backends/).
log "building the PyTorch bridge (bridge/, in place) for the torch.compile step"
(cd bridge && python3 setup.py -q build_ext --inplace)
mkdir -p "$DEST/python"
cp -a bridge/torch_hal "$DEST/python/"
find "$DEST/python" -name __pycache__ -prune -exec rm -rf {} +
for lib in libstdc++.so.6 libgcc_s.so.1; do
    src=$(gcc -print-file-name="$lib")
    [ -e "$src" ] && install -m 0644 "$(readlink -f "$src")" "$DEST/fallback-lib/$lib"
done

cuda_version=$(cuda_def CUDA_VERSION)
nccl_version=$(cuda_def NCCL_VERSION)
nccl_from=$(cuda_def NCCL_SOURCE)
nccl_from=${nccl_from:+ (from $nccl_from)}
{
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)" \
        "($(git status --porcelain 2>/dev/null | wc -l | tr -d ' ') files changed or untracked)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(gcc --version | head -1)," \
        "$(ldd --version 2>&1 | head -1)"
    echo "CUDA headers ${cuda_version:-?}; NCCL headers ${nccl_version:-none}$nccl_from"
    echo "files:"
    (cd "$DEST" && find . -type f ! -name MANIFEST.txt | sort | xargs sha256sum)
} >"$DEST/MANIFEST.txt"
log "$(du -sh "$DEST" | cut -f1) in out/gpu-bundle:"
(cd "$DEST" && find . -type f | sort | sed 's/^/  /')
log "check it here with: bash conformance/gpu/run.sh --dry-run"
