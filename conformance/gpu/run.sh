#!/usr/bin/env bash
# Runs the conformance suite, the cuda backend's own GPU tests (cuda_api_test, cuda_slot_test),
# hal_bench's cuda part and torch.compile on a torch_hal cuda device (compile_check.py) on an
# NVIDIA GPU, on a machine that has the CUDA driver and runtime but neither Bazel nor
# GoogleTest (torch.compile also needs torch 2.13.0 and triton there). See
# hal_backends/cuda/README.md.
#
#   bash conformance/gpu/run.sh [--dry-run] [--from-source] [--quick] [--bundle DIR] [--out DIR]
#
# Binaries come from the bundle `make gpu-bundle` builds (out/gpu-bundle: the conformance
# harness, the backend's tests, the cuda and cpu backends, the loader fixtures, hal_bench). With
# --from-source, or without a bundle, the HAL, the cuda backend and hal_bench are compiled here
# with gcc; the conformance harness and the backend's tests need GoogleTest and come only from
# the bundle.
#
# libnccl: $HAL_NCCL_LIBRARY, else Python's nvidia-nccl-cu13 (what torch installs), the toolkit,
# ldconfig; run.log and env.txt name it, its version, and the NCCL headers the backend was built
# with (a backend built without NCCL loads none).
#
# Results go to $OUT (default out/gpu-run), at most 8 files: run.log (this script's progress),
# env.txt (GPU, driver, toolkit, libraries, bundle manifest), conformance.log, conformance.json
# (GoogleTest JSON of every area), conformance.md (summary), cuda_tests.log (the backend's
# tests), bench.txt, compile.log (torch.compile against eager).
#
# --dry-run   check the bundle and the machine, print the plan, run nothing on a GPU.
# --quick     hal_bench --quick, and conformance without the collectives' process jobs.
#
# Exit status: 0 everything ran and passed; 1 a step failed or tests failed; 2 usage; 3 no CUDA
# device (nothing ran; env.txt and run.log say why). The whole run stays within
# HAL_GPU_RUN_BUDGET_S seconds (default 460), each step within its own timeout.
set -euo pipefail

START=$(date +%s)
BUDGET=${HAL_GPU_RUN_BUDGET_S:-460}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUNDLE="$REPO/out/gpu-bundle"
OUTDIR="${OUT:-$REPO/out/gpu-run}"
DRY_RUN=0
FROM_SOURCE=0
QUICK=0

usage() { sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --from-source) FROM_SOURCE=1 ;;
    --quick) QUICK=1 ;;
    --bundle) BUNDLE=$(cd "$2" && pwd); shift ;;
    --bundle=*) BUNDLE=$(cd "${1#*=}" && pwd) ;;
    --out) OUTDIR="$2"; shift ;;
    --out=*) OUTDIR="${1#*=}" ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hal-gpu-run.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
: >"$OUTDIR/run.log"

elapsed() { echo $(($(date +%s) - START)); }
log() { echo "[run.sh +$(elapsed)s] $*" | tee -a "$OUTDIR/run.log"; }
# Seconds a step may take: its share, but never past the run's budget (20 s kept for the end).
step_timeout() {
    local want=$1 left=$((BUDGET - $(elapsed) - 20))
    [ "$left" -lt 5 ] && left=5
    [ "$want" -lt "$left" ] && echo "$want" || echo "$left"
}

FAILED_STEPS=()
fail_step() { FAILED_STEPS+=("$1"); log "FAILED: $1"; }

log "torch-hal GPU run: repo $REPO, results in $OUTDIR, budget ${BUDGET}s" \
    "(dry-run=$DRY_RUN from-source=$FROM_SOURCE quick=$QUICK)"

# ---- the machine -------------------------------------------------------------------------------

ENV_TXT="$OUTDIR/env.txt"
{
    echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "== uname: $(uname -a)"
    echo "== libc: $(ldd --version 2>&1 | head -1)"
    echo "== cpus: $(nproc)   memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
    echo "== nvidia-smi"
    if command -v nvidia-smi >/dev/null 2>&1; then
        timeout 30 nvidia-smi 2>&1 || echo "(nvidia-smi failed: $?)"
        timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,pci.bus_id \
            --format=csv 2>&1 || true
    else
        echo "(no nvidia-smi on this machine)"
    fi
    echo "== nvcc"
    (command -v nvcc >/dev/null 2>&1 && nvcc --version) ||
        (test -x /usr/local/cuda/bin/nvcc && /usr/local/cuda/bin/nvcc --version) ||
        echo "(no nvcc)"
    echo "== CUDA and NCCL libraries known to the dynamic loader"
    (ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libcudart\.so|libnccl\.so|libnvidia-ml' ||
        true) | head -20
} >"$ENV_TXT" 2>&1
log "machine described in env.txt"

# Finds a file the backend needs, trying in the given order: "toolkit" (/usr/local/cuda*),
# "loader" (the dynamic loader's cache), "python" (the nvidia-* wheels PyTorch installs).
# Prints the path or nothing.
find_file() {
    local name=$1 found="" where
    shift
    for where in "$@"; do
        case "$where" in
        toolkit)
            for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/include \
                /usr/local/cuda-*/lib64; do
                [ -e "$d/$name" ] && found="$d/$name" && break
            done
            ;;
        loader)
            found=$(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF; exit}')
            ;;
        python)
            command -v python3 >/dev/null 2>&1 || continue
            found=$(timeout 30 python3 - "$name" <<'EOF' 2>/dev/null || true
import glob, os, sys
name = sys.argv[1]
for d in sys.path:
    for hit in sorted(glob.glob(os.path.join(d, "nvidia", "**", name), recursive=True)):
        print(hit)
        sys.exit(0)
EOF
)
            ;;
        esac
        [ -n "$found" ] && break
    done
    echo "$found"
}

# NCCL_MAJOR.MINOR.PATCH of an nccl.h.
nccl_h_version() {
    awk '$1 == "#define" && $2 ~ /^NCCL_(MAJOR|MINOR|PATCH)$/ { v[$2] = $3 }
        END { print v["NCCL_MAJOR"] "." v["NCCL_MINOR"] "." v["NCCL_PATCH"] }' "$1"
}

if [ -z "${HAL_CUDA_LIBCUDART:-}" ]; then
    # The toolkit's runtime first: it matches nvcc and the driver the image was made for.
    HAL_CUDA_LIBCUDART=$(find_file libcudart.so.13 toolkit loader python)
    [ -n "$HAL_CUDA_LIBCUDART" ] && export HAL_CUDA_LIBCUDART
fi
if [ -z "${HAL_NCCL_LIBRARY:-}" ]; then
    HAL_NCCL_LIBRARY=$(find_file libnccl.so.2 python toolkit loader)
    if [ -n "$HAL_NCCL_LIBRARY" ]; then
        export HAL_NCCL_LIBRARY
    else
        export HAL_NCCL_LIBRARY=none
        NCCL_NOT_FOUND=1
    fi
fi
{
    echo "== libraries the backend loads"
    echo "HAL_CUDA_LIBCUDART=${HAL_CUDA_LIBCUDART:-(default search)}"
    echo "HAL_NCCL_LIBRARY=${HAL_NCCL_LIBRARY}"
    echo "== bundle: $BUNDLE"
    if [ -f "$BUNDLE/MANIFEST.txt" ]; then cat "$BUNDLE/MANIFEST.txt"; else echo "(no bundle)"; fi
} >>"$ENV_TXT"
log "libcudart: ${HAL_CUDA_LIBCUDART:-(default search)}; libnccl: $HAL_NCCL_LIBRARY"

# ---- binaries ----------------------------------------------------------------------------------

CONFORMANCE=""
BENCH=""
NCCL_BUILT="" # the NCCL headers the backend was built with: "2.30.7 (where)"
CUDA_TESTS=() # the backend's tests, from the bundle
BACKENDS=""
FIXTURES=""
BUNDLE_PYTHON="" # the bundle's bridge (torch_hal), for the torch.compile step

use_bundle() {
    local b=$BUNDLE
    for f in bin/hal_conformance bin/hal_bench backends/libhal_backend_cuda.so; do
        [ -e "$b/$f" ] || { log "bundle: $b/$f is missing"; return 1; }
    done
    # The harness is C++: if this machine's libstdc++ is older than the build machine's, use
    # the copy the bundle carries.
    if ldd "$b/bin/hal_conformance" 2>&1 | grep -qE 'not found|version .* not found'; then
        export LD_LIBRARY_PATH="$b/fallback-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        log "bundle: using its own libstdc++ (this machine's is older)"
        if ldd "$b/bin/hal_conformance" 2>&1 | grep -qE 'not found'; then
            ldd "$b/bin/hal_conformance" | tee -a "$OUTDIR/run.log"
            return 1
        fi
    fi
    CONFORMANCE="$b/bin/hal_conformance"
    BENCH="$b/bin/hal_bench"
    local t
    for t in cuda_api_test cuda_slot_test; do
        if [ -e "$b/bin/$t" ]; then
            CUDA_TESTS+=("$b/bin/$t")
        else
            log "bundle: $b/bin/$t is missing (the backend's tests will not run)"
        fi
    done
    BACKENDS="$b/backends"
    FIXTURES="$b/fixtures"
    # "CUDA headers 13.0; NCCL headers 2.30.7 (from ...)" in the manifest: what follows "NCCL
    # headers", unless it is "none".
    NCCL_BUILT=$(sed -n 's/^CUDA headers .*; NCCL headers //p' "$b/MANIFEST.txt" 2>/dev/null |
        grep -v '^none' || true)
    [ -e "$b/python/torch_hal/__init__.py" ] && BUNDLE_PYTHON="$b/python"
    [ -e "$b/fixtures/cts_triton_add.cubin" ] || log "bundle: fixtures/cts_triton_add.cubin is" \
        "missing (program.triton_cubin will fail; make gpu-bundle compiles it with triton)"
    log "binaries: the bundle ($(grep -m1 '^commit' "$b/MANIFEST.txt" 2>/dev/null || echo 'no manifest'))"
}

# Compiles the HAL, the cuda backend and hal_bench with gcc (no GoogleTest: no harness).
build_from_source() {
    local inc="" nccl_inc="" out="$WORK/build" cc=${CC:-gcc}
    command -v "$cc" >/dev/null || { log "from source: no $cc"; return 1; }
    for d in "${CUDA_HOME:-}" /usr/local/cuda "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/y)")/.."; do
        [ -n "$d" ] && [ -e "$d/include/cuda_runtime_api.h" ] && inc="$d/include" && break
    done
    if [ -z "$inc" ]; then
        inc=$(dirname "$(find_file cuda_runtime_api.h python)" 2>/dev/null || true)
        [ -e "$inc/cuda_runtime_api.h" ] || inc=""
    fi
    [ -n "$inc" ] || { log "from source: no CUDA headers (cuda_runtime_api.h)"; return 1; }
    nccl_inc=$(dirname "$(find_file nccl.h python toolkit)" 2>/dev/null || true)
    [ -e "$nccl_inc/nccl.h" ] || nccl_inc=""
    mkdir -p "$out/obj" "$out/backends"
    local flags=(-std=c11 -D_GNU_SOURCE -O2 -g -fPIC -Wall -Wextra -Wno-unused-parameter -pthread
        -I"$REPO" -I"$REPO/hal/include")
    local cuda_flags=(-I"$inc" -fvisibility=hidden)
    if [ -n "$nccl_inc" ]; then
        cuda_flags+=(-I"$nccl_inc" -DHAL_CUDA_WITH_NCCL=1)
    fi
    log "from source: CUDA headers $inc, NCCL headers ${nccl_inc:-none}"
    NCCL_BUILT=${nccl_inc:+"$(nccl_h_version "$nccl_inc/nccl.h") ($nccl_inc)"}
    (
        cd "$REPO"
        local hal_srcs=(hal/src/*.c hal/src/comm/*.c hal/layers/*.c hal/services/*.c)
        local backend_srcs=(hal_backends/cuda/cuda_*.c)
        local bench_srcs=(bench/hal_bench.c bench/bench_util.c bench/bench_mem*.c
            bench/bench_coll*.c bench/bench_cuda.c bench/bench_launch.c bench/bench_results.c
            bench/bench_json.c)
        printf '%s\n' "${hal_srcs[@]}" | xargs -P "$(nproc)" -I{} sh -c \
            "$cc ${flags[*]} -c {} -o $out/obj/\$(echo {} | tr / _).o" &&
            "$cc" "${flags[@]}" "${cuda_flags[@]}" -shared -o "$out/backends/libhal_backend_cuda.so" \
                "${backend_srcs[@]}" -ldl &&
            "$cc" "${flags[@]}" -I"$inc" ${nccl_inc:+-I"$nccl_inc" -DHAL_BENCH_WITH_NCCL=1} \
                -DHAL_BENCH_WITH_CUDA=1 -o "$out/hal_bench" "${bench_srcs[@]}" "$out"/obj/*.o \
                -ldl -lrt -lm
    ) >>"$OUTDIR/run.log" 2>&1 || { log "from source: compilation failed (run.log)"; return 1; }
    # The launch part's PTX kernel, where the toolkit has nvcc (else that part says it is
    # missing).
    if [ -x "$inc/../bin/nvcc" ]; then
        "$inc/../bin/nvcc" -ptx -arch=compute_75 "$REPO/bench/bench_kernels.cu" \
            -o "$out/bench_kernels.ptx" >>"$OUTDIR/run.log" 2>&1 ||
            log "from source: nvcc could not build bench_kernels.ptx (run.log)"
    fi
    BENCH="$out/hal_bench"
    BACKENDS="$out/backends"
    log "from source: built the HAL, the cuda backend and hal_bench"
}

if [ -d "$BUNDLE" ]; then
    use_bundle || fail_step "bundle"
fi
if [ "$FROM_SOURCE" = 1 ] || [ -z "$BENCH" ]; then
    # The harness, if the bundle has one, still comes from it: it needs GoogleTest.
    [ "$FROM_SOURCE" = 0 ] && log "no usable bundle at $BUNDLE: building from source"
    BENCH=""
    build_from_source || fail_step "build from source"
fi
if [ -z "$BENCH" ]; then
    log "no binaries: nothing can run"
    exit 1
fi
export HAL_BACKEND_PATH="$BACKENDS"
[ -n "$FIXTURES" ] && export HAL_CTS_FIXTURE_DIR="$FIXTURES"

# ---- NCCL --------------------------------------------------------------------------------------

# The NCCL the backend loads: HAL_NCCL_LIBRARY, set above, is the only file it tries. Its version
# comes from the library itself (ncclGetVersion needs no GPU), next to the headers the backend
# was built with. A backend built without NCCL (no NCCL code: its loader's message is absent)
# loads none, and cuda_api_test then runs once.
probe_nccl() {
    timeout 60 python3 - "$1" <<'EOF'
import ctypes, sys
try:
    lib = ctypes.CDLL(sys.argv[1])
except OSError as e:
    print("cannot load it: %s" % e)
    sys.exit(1)
v = ctypes.c_int(0)
if lib.ncclGetVersion(ctypes.byref(v)) != 0:
    print("ncclGetVersion failed")
    sys.exit(1)
c = v.value  # NCCL_VERSION_CODE: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before
if c >= 20900:
    print("NCCL %d.%d.%d" % (c // 10000, c // 100 % 100, c % 100))
else:
    print("NCCL %d.%d.%d" % (c // 1000, c // 100 % 10, c % 100))
EOF
}
NCCL_LOADER_MSG="cannot load NCCL (libnccl.so.2)" # only in a backend built with NCCL
if ! grep -qaF "$NCCL_LOADER_MSG" "$BACKENDS/libhal_backend_cuda.so" 2>/dev/null; then
    NCCL_LOADED="none: the backend was built without NCCL"
    export HAL_NCCL_LIBRARY=none
elif [ "${NCCL_NOT_FOUND:-0}" = 1 ]; then
    NCCL_LOADED="none: no libnccl.so.2 found (Python's nvidia-nccl-cu13, the toolkit, ldconfig)"
elif [ "$HAL_NCCL_LIBRARY" = none ]; then
    NCCL_LOADED="none (HAL_NCCL_LIBRARY=none)"
elif ! command -v python3 >/dev/null 2>&1; then
    NCCL_LOADED="$HAL_NCCL_LIBRARY (version unknown: no python3)"
else
    NCCL_LOADED="$HAL_NCCL_LIBRARY: $(probe_nccl "$HAL_NCCL_LIBRARY" 2>&1 || true)"
fi
log "NCCL: the backend was built with NCCL headers ${NCCL_BUILT:-none}; it loads $NCCL_LOADED"
echo "== NCCL: built with headers ${NCCL_BUILT:-none}; loads $NCCL_LOADED" >>"$ENV_TXT"

# ---- is there a GPU? ---------------------------------------------------------------------------

# Asks the CUDA runtime the backend will load (through Python's ctypes, so no binary is
# involved): prints the device count or the CUDA error.
probe_gpu() {
    timeout 60 python3 - "${HAL_CUDA_LIBCUDART:-libcudart.so.13}" <<'EOF'
import ctypes, sys
try:
    rt = ctypes.CDLL(sys.argv[1])
except OSError as e:
    print("cannot load the CUDA runtime: %s" % e)
    sys.exit(1)
n = ctypes.c_int(0)
err = rt.cudaGetDeviceCount(ctypes.byref(n))
if err != 0:
    rt.cudaGetErrorName.restype = ctypes.c_char_p
    rt.cudaGetErrorString.restype = ctypes.c_char_p
    print("cudaGetDeviceCount returned %s (%d): %s" % (rt.cudaGetErrorName(err).decode(), err,
                                                     rt.cudaGetErrorString(err).decode()))
    sys.exit(1)
print("%d CUDA device(s)" % n.value)
sys.exit(0 if n.value > 0 else 1)
EOF
}

GPU_NAME=$(timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader \
    2>/dev/null | head -1 | sed 's/, / (driver /; s/$/)/') || true
[ -n "$GPU_NAME" ] || GPU_NAME="an unnamed GPU"
GPU_OK=1
if ! command -v python3 >/dev/null 2>&1; then
    log "no python3: skipping the device probe (the backend reports it instead)"
elif PROBE=$(probe_gpu 2>&1); then
    log "device probe: $PROBE"
else
    GPU_OK=0
    log "no CUDA device: $PROBE"
    echo "== device probe: $PROBE" >>"$ENV_TXT"
fi

# The suite runs in parts (an area, or a slice of the collectives), each with its own timeout and
# JSON file, so that a part that runs out of time costs its own results only.
PARTS=(status=status.* backend=backend.* device=device.* memory=memory.* stream=stream.*
    event=event.* handles=handles.* threads=threads.* allocator=allocator.* program=program.*
    comm-threads=comm.*threads* comm-processes=comm.*processes*
    comm-other=comm.*-comm.*threads*:comm.*processes*)
# comm.memory_kinds puts both of its ranks on the one device's default stream, which cannot
# complete on a one-device backend (see hal_backends/cuda/README.md); HAL_GPU_RUN_EXCLUDE
# replaces this list (":"-separated GoogleTest patterns, empty for none).
EXCLUDE=${HAL_GPU_RUN_EXCLUDE-comm.memory_kinds/*}
if [ "$QUICK" = 1 ]; then
    EXCLUDE="${EXCLUDE:+$EXCLUDE:}comm.*processes*"
fi
# The GoogleTest filter of a part (label=pattern), with the exclusions added.
part_filter() {
    local pattern=${1#*=}
    if [ -z "$EXCLUDE" ]; then
        echo "$pattern"
    elif [[ "$pattern" == *-* ]]; then
        echo "$pattern:$EXCLUDE"
    else
        echo "$pattern-$EXCLUDE"
    fi
}

# The backend's own tests: "label|HAL_NCCL_LIBRARY|binary" each. cuda_api_test runs with the
# NCCL found above and, when there is one, again without it (the HAL's host-staged collectives
# on one rank); cuda_slot_test does not use NCCL.
CUDA_TEST_RUNS=()
for t in "${CUDA_TESTS[@]}"; do
    case "$(basename "$t")" in
    cuda_api_test)
        CUDA_TEST_RUNS+=("cuda_api_test|$HAL_NCCL_LIBRARY|$t")
        if [ "$HAL_NCCL_LIBRARY" != none ]; then
            CUDA_TEST_RUNS+=("cuda_api_test (no NCCL)|none|$t")
        fi
        ;;
    *) CUDA_TEST_RUNS+=("$(basename "$t")|none|$t") ;;
    esac
done

if [ "$DRY_RUN" = 1 ]; then
    log "dry run: would run, with HAL_BACKEND_PATH=$HAL_BACKEND_PATH:"
    for part in "${PARTS[@]}"; do
        log "  ${CONFORMANCE:-(no harness)} --backend=cuda --timeout=60" \
            "--gtest_filter='$(part_filter "$part")'"
    done
    for run in "${CUDA_TEST_RUNS[@]}"; do
        IFS='|' read -r label nccl bin <<<"$run"
        log "  HAL_NCCL_LIBRARY=$nccl $bin"
    done
    [ ${#CUDA_TEST_RUNS[@]} -gt 0 ] || log "  (no backend tests: they need the bundle)"
    log "  $BENCH --part=cuda$([ "$QUICK" = 1 ] && echo ' --quick')"
    log "  $BENCH --part=launch --backend=cuda$([ "$QUICK" = 1 ] && echo ' --quick')"
    log "  TORCH_HAL_BACKEND=cuda PYTHONPATH=${BUNDLE_PYTHON:-(no bridge in the bundle)}" \
        "python3 $HERE/compile_check.py"
    [ "$GPU_OK" = 1 ] || log "dry run: and this machine has no CUDA device (see above)"
    if [ -n "$CONFORMANCE" ]; then
        "$CONFORMANCE" --help >/dev/null 2>&1 && log "dry run: the harness starts" ||
            fail_step "the harness does not start"
    fi
    for t in "${CUDA_TESTS[@]}"; do
        # Lists its tests without running any (nothing touches CUDA).
        "$t" --gtest_list_tests >/dev/null 2>&1 && log "dry run: $(basename "$t") starts" ||
            fail_step "$(basename "$t") does not start"
    done
    "$BENCH" --help >/dev/null 2>&1 && log "dry run: hal_bench starts" ||
        fail_step "hal_bench does not start"
    [ ${#FAILED_STEPS[@]} -eq 0 ] && exit 0 || exit 1
fi

if [ "$GPU_OK" = 0 ]; then
    log "run.sh: no CUDA device on this machine; nothing was run (exit 3)"
    exit 3
fi

# ---- conformance -------------------------------------------------------------------------------

CONF_LOG="$OUTDIR/conformance.log"
: >"$CONF_LOG"
SPECS=()
if [ -n "$CONFORMANCE" ]; then
    declare -A SHARE=([comm-threads]=120 [comm-processes]=150 [comm-other]=90 [threads]=60
        [memory]=60 [stream]=45 [event]=45 [backend]=45)
    for part in "${PARTS[@]}"; do
        area=${part%%=*}
        t=$(step_timeout "${SHARE[$area]:-30}")
        json="$WORK/conformance-$area.json"
        log "conformance: $area (timeout ${t}s)"
        echo "===== area $area" >>"$CONF_LOG"
        rc=0
        timeout -k 5 "$t" "$CONFORMANCE" --backend=cuda --timeout=60 \
            --gtest_filter="$(part_filter "$part")" --gtest_output="json:$json" \
            >>"$CONF_LOG" 2>&1 || rc=$?
        log "conformance: $area: $(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$CONF_LOG" | tail -1) (exit $rc)"
        SPECS+=("$area=$json:$CONF_LOG.$area:$rc")
        # The area's part of the log, for its skip reasons.
        awk -v a="===== area $area" 'index($0, a) == 1 {on = 1; next} /^===== area / {on = 0} on' \
            "$CONF_LOG" >"$CONF_LOG.$area"
    done
    title="cuda on $GPU_NAME${EXCLUDE:+ (excluded: $EXCLUDE)}"
    if SUMMARY=$(python3 "$HERE/summarize.py" --title "$title" \
        --out-json "$OUTDIR/conformance.json" --out-md "$OUTDIR/conformance.md" "${SPECS[@]}"); then
        log "conformance: $SUMMARY"
        case "$SUMMARY" in *" 0 failed"*) ;; *) fail_step "conformance: $SUMMARY" ;; esac
    else
        fail_step "conformance summary"
    fi
    rm -f "$CONF_LOG".*
else
    log "conformance: skipped, no harness (it needs the bundle: make gpu-bundle)"
    fail_step "conformance not run"
fi

# ---- the backend's own tests -------------------------------------------------------------------

# Each run has its own timeout; their output goes to cuda_tests.log, one section per run.
TESTS_LOG="$OUTDIR/cuda_tests.log"
if [ ${#CUDA_TEST_RUNS[@]} -gt 0 ]; then
    : >"$TESTS_LOG"
    for run in "${CUDA_TEST_RUNS[@]}"; do
        IFS='|' read -r label nccl bin <<<"$run"
        t=$(step_timeout 60)
        log "cuda tests: $label (timeout ${t}s)"
        part="$WORK/cuda-test.log"
        rc=0
        HAL_NCCL_LIBRARY=$nccl timeout -k 5 "$t" "$bin" >"$part" 2>&1 || rc=$?
        {
            echo "===== $label (HAL_NCCL_LIBRARY=$nccl; exit $rc)"
            cat "$part"
        } >>"$TESTS_LOG"
        # GoogleTest's closing lines, e.g. "[  PASSED  ] 9 tests." -> "9 passed".
        summary=$(grep -E '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?[,.]' "$part" |
            sed -E 's/^\[ +([A-Z]+) +\] ([0-9]+) .*/\2 \1/' | tr 'A-Z' 'a-z' | paste -sd, - |
            sed 's/,/, /g' || true)
        log "cuda tests: $label: ${summary:-no summary line} (exit $rc)"
        [ "$rc" = 0 ] || fail_step "cuda tests: $label (exit $rc)"
    done
else
    log "cuda tests: skipped, not in the bundle (they need it: make gpu-bundle)"
    fail_step "cuda tests not run"
fi

# ---- benchmark ---------------------------------------------------------------------------------

t=$(step_timeout 150)
log "bench: hal_bench --part=cuda (timeout ${t}s)"
rc=0
bench_args=(--part=cuda)
[ "$QUICK" = 1 ] && bench_args+=(--quick)
timeout -k 5 "$t" "$BENCH" "${bench_args[@]}" >"$OUTDIR/bench.txt" 2>&1 || rc=$?
log "bench: $(grep -E '^bench cuda:' "$OUTDIR/bench.txt" || echo 'no summary line') (exit $rc)"
[ "$rc" = 0 ] || fail_step "bench (exit $rc)"

# Kernel launches through the HAL's program API (an empty PTX kernel), next to a 1-byte memset.
t=$(step_timeout 60)
log "bench: hal_bench --part=launch --backend=cuda (timeout ${t}s)"
rc=0
bench_args=(--part=launch --backend=cuda)
[ "$QUICK" = 1 ] && bench_args+=(--quick)
timeout -k 5 "$t" "$BENCH" "${bench_args[@]}" >>"$OUTDIR/bench.txt" 2>&1 || rc=$?
log "bench launch: $(grep -E 'launch (enqueue|round trip)' "$OUTDIR/bench.txt" | tr '\n' ';' || true) (exit $rc)"
[ "$rc" = 0 ] || fail_step "bench launch (exit $rc)"

# ---- torch.compile ------------------------------------------------------------------------------

# torch.compile on a torch_hal device of the cuda backend (Inductor's Triton kernels compiled for
# the GPU and launched through the HAL), compared with eager: compile_check.py. It needs the
# bridge from the bundle (python/torch_hal, built against torch 2.13.0) and, on this machine,
# torch 2.13.0 and the triton package; without them the step fails, saying which is missing.
COMPILE_LOG="$OUTDIR/compile.log"
compile_missing=""
if [ -z "$BUNDLE_PYTHON" ]; then
    compile_missing="the bundle's bridge (python/torch_hal: make gpu-bundle)"
elif ! python3 -c 'import torch, triton' >/dev/null 2>&1; then
    compile_missing="torch and triton for python3 ($(python3 -c 'import torch, triton' 2>&1 | tail -1))"
fi
if [ -n "$compile_missing" ]; then
    log "torch.compile: not run, missing $compile_missing"
    fail_step "torch.compile not run"
else
    t=$(step_timeout 180)
    log "torch.compile: compile_check.py on cuda (timeout ${t}s)"
    rc=0
    TORCH_HAL_BACKEND=cuda PYTHONPATH="$BUNDLE_PYTHON${PYTHONPATH:+:$PYTHONPATH}" \
        TORCHINDUCTOR_CACHE_DIR="$WORK/inductor" TRITON_CACHE_DIR="$WORK/triton" \
        timeout -k 5 "$t" python3 "$HERE/compile_check.py" >"$COMPILE_LOG" 2>&1 || rc=$?
    while IFS= read -r line; do log "torch.compile: $line"; done < <(grep -E '^compile check' "$COMPILE_LOG")
    [ "$rc" = 0 ] || fail_step "torch.compile (exit $rc)"
fi

# ---- end ---------------------------------------------------------------------------------------

if [ ${#FAILED_STEPS[@]} -eq 0 ]; then
    log "done in $(elapsed)s: everything passed"
    exit 0
fi
log "done in $(elapsed)s; failed: ${FAILED_STEPS[*]}"
exit 1
