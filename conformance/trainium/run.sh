#!/usr/bin/env bash
# Runs what the repository tests of the Trainium backend on a real Neuron runtime, on an AWS
# Trainium (or Inferentia2) instance with the Neuron driver and runtime installed, and writes a
# report to paste into an issue. See hal_backends/trainium/README.md, "Running on real Trainium".
#
#   bash conformance/trainium/run.sh [--dry-run] [--quick] [--cores N] [--skip STEP,...]
#                                    [--out DIR] [--allow-emulator]
#
# Steps, each with a timeout of its own; a failing step does not stop the others:
#   env          instance type, Neuron driver and packages, libnrt's version, neuron-ls
#   build        make deps; bazel build of the HAL, the backend, the suite, hal_bench; make bridge
#   probe        the backend's path line on this runtime (which paths it takes, and why)
#   unit         the backend's tests and the libnrt contract tests, against this runtime
#   conformance  the conformance suite on N cores (native collectives), then its comm area once
#                more with HAL_NEURON_NATIVE_COLLECTIVES=0 (host-staged)
#   bench        hal_bench --backend=trainium (parts mem and coll)
#   demo         examples/demo.sh: DDP training on 2 NeuronCores against the CPU
#   compile      with the Neuron compiler (NEURON_CC, or neuronx-cc on PATH): the conformance
#                suite's StableHLO bodies compiled to NEFF and run on a NeuronCore, then
#                torch.compile on neuron through neuronx-cc (bridge/tests/test_compile_stablehlo.py)
#
# --dry-run         describe the machine and print the plan; run nothing on a NeuronCore
# --quick           hal_bench --quick, conformance without the collectives' process jobs, demo
#                   of 10 steps without its torch.compile part
# --cores N         NeuronCores the conformance suite and the bench take (default 2; the suite's
#                   rank and probe processes take more, N at a time)
# --skip LIST       steps to leave out (comma-separated), e.g. --skip bench,demo
# --out DIR         where the results go (default out/trainium-run)
# --allow-emulator  run on the libnrt emulator (to try this script without hardware; the report
#                   then says so on its first line)
#
# Results: report.md (everything to paste: versions, instance, each step's result, the
# conformance tables, failed tests, known failures and skips with their reasons, the bench's
# targets, what is verified only on the emulator), env.txt, and one log per step.
#
# Exit status: 0 every step passed; 1 a step failed; 2 usage; 3 no Neuron runtime or device
# (only env ran). NeuronCores belong to one process at a time: stop other Neuron jobs first.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUTDIR="$REPO/out/trainium-run"
DRY_RUN=0
QUICK=0
CORES=2
SKIP=","
ALLOW_EMULATOR=0

usage() { sed -n '2,33p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --quick) QUICK=1 ;;
    --cores) CORES="$2"; shift ;;
    --cores=*) CORES="${1#*=}" ;;
    --skip) SKIP=",$2,"; shift ;;
    --skip=*) SKIP=",${1#*=}," ;;
    --out) OUTDIR="$2"; shift ;;
    --out=*) OUTDIR="${1#*=}" ;;
    --allow-emulator) ALLOW_EMULATOR=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
case "$CORES" in
'' | *[!0-9]* | 0) echo "run.sh: --cores needs a positive number, not '$CORES'" >&2; exit 2 ;;
esac

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
START=$(date +%s)
: >"$OUTDIR/run.log"
elapsed() { echo $(($(date +%s) - START)); }
log() { echo "[run.sh +$(elapsed)s] $*" | tee -a "$OUTDIR/run.log"; }
skipped() { case "$SKIP" in *",$1,"*) return 0 ;; esac; return 1; }

declare -A RESULT SECONDS_TAKEN
STEPS=(env build probe unit conformance bench demo compile)
for s in "${STEPS[@]}"; do RESULT[$s]="not run"; SECONDS_TAKEN[$s]=0; done

# Runs step $1 (the shell function step_$1) with a timeout of $2 seconds, its output into
# $1.log. The functions and variables the steps use are exported for that.
run_step() {
    local step=$1 limit=$2 t0 rc
    if skipped "$step"; then
        RESULT[$step]="skipped (--skip)"
        log "$step: skipped"
        return 0
    fi
    log "$step: started (timeout ${limit}s, log $step.log)"
    t0=$(date +%s)
    timeout -k 30 "$limit" bash -c "step_$step" >"$OUTDIR/$step.log" 2>&1 </dev/null
    rc=$?
    SECONDS_TAKEN[$step]=$(($(date +%s) - t0))
    case $rc in
    0) RESULT[$step]="passed" ;;
    124 | 137) RESULT[$step]="FAILED: timed out after ${limit}s" ;;
    *) RESULT[$step]="FAILED (exit $rc)" ;;
    esac
    log "$step: ${RESULT[$step]} in ${SECONDS_TAKEN[$step]}s"
}

# The last lines of a log, for the report.
report_tail() { tail -n "${2:-20}" "$1" 2>/dev/null | sed 's/^/    /'; }

# ---- the runtime -------------------------------------------------------------------------------

# The runtime the backend loads: HAL_NEURON_LIBNRT, else where aws-neuronx-runtime-lib installs it.
LIBNRT="${HAL_NEURON_LIBNRT:-/opt/aws/neuron/lib/libnrt.so.1}"
# Nothing of the emulator's may leak in: its variables are cleared, and torch_hal must not fall
# back to the emulator it bundles.
for v in $(env | sed -n 's/^\(NEURON_EMU_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
unset HAL_NEURON_NATIVE_COLLECTIVES NEURON_RT_VISIBLE_CORES NEURON_RT_NUM_CORES
export HAL_NEURON_LIBNRT="$LIBNRT" HAL_NEURON_BUNDLED_LIBNRT=0

# "major.minor.patch.maintenance<TAB>detail<TAB>emulator|runtime", from nrt_get_version (callable
# before nrt_init: no NeuronCore is taken).
runtime_version() {
    python3 - "$LIBNRT" <<'EOF' 2>&1
import ctypes, sys
class V(ctypes.Structure):
    _fields_ = [("v", ctypes.c_uint64 * 4), ("detail", ctypes.c_char * 128),
                ("git", ctypes.c_char * 64)]
lib = ctypes.CDLL(sys.argv[1])
kind = "emulator" if hasattr(lib, "nrt_emu_set_fault") else "runtime"
if not hasattr(lib, "nrt_get_version"):
    print("unknown\t(no nrt_get_version)\t" + kind)
    sys.exit(0)
v = V()
rc = lib.nrt_get_version(ctypes.byref(v), ctypes.sizeof(v))
print(".".join(str(x) for x in v.v) if rc == 0 else f"unknown (nrt_get_version returned {rc})",
      v.detail.decode(errors="replace"), kind, sep="\t")
EOF
}

step_env() {
    echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "== commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null) $(git -C "$REPO" status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
    echo "== uname: $(uname -a)"
    echo "== os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
    echo "== cpus: $(nproc)   memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
    local token type
    token=$(curl -s -m 2 -X PUT http://169.254.169.254/latest/api/token \
        -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null || true)
    type=$(curl -s -f -m 2 -H "X-aws-ec2-metadata-token: $token" \
        http://169.254.169.254/latest/meta-data/instance-type 2>/dev/null || true)
    [[ "$type" =~ ^[a-z0-9-]+\.[a-z0-9]+$ ]] || type=""
    echo "== instance type: ${type:-(unknown: no instance metadata)}"
    echo "== Neuron driver: $(cat /sys/module/neuron/version 2>/dev/null || modinfo -F version neuron 2>/dev/null || echo '(not loaded)')"
    echo "== Neuron devices: $(ls /dev/neuron* 2>/dev/null | tr '\n' ' ')"
    echo "== Neuron packages"
    (dpkg-query -W -f '${Package} ${Version}\n' 'aws-neuronx-*' 2>/dev/null ||
        rpm -qa 'aws-neuronx-*' 2>/dev/null || true) | sed 's/^/   /'
    echo "== libnrt: $LIBNRT"
    echo "   version: $(runtime_version | tr '\t' ' ')"
    echo "== neuron-ls"
    if [ -x /opt/aws/neuron/bin/neuron-ls ]; then
        timeout 60 /opt/aws/neuron/bin/neuron-ls 2>&1 | sed 's/^/   /'
    else
        echo "   (no /opt/aws/neuron/bin/neuron-ls: aws-neuronx-tools is not installed)"
    fi
    echo "== python: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1)"
}

step_build() {
    set -e
    cd "$REPO"
    make deps
    bazel build //conformance:hal_conformance //bench:hal_bench \
        //hal_backends/trainium:libhal_backend_trainium.so //hal_backends/cpu:libhal_backend_cpu.so
    make bridge
}

# The backend's path line (at NEURON_RT_LOG_LEVEL=INFO) from one short conformance test, run in
# the harness's own process.
step_probe() {
    cd "$REPO"
    NEURON_RT_LOG_LEVEL=INFO NEURON_RT_NUM_CORES=1 \
        HAL_BACKEND_PATH="$REPO/bazel-bin/hal_backends/trainium" \
        ./bazel-bin/conformance/hal_conformance --backend=trainium --in-process \
        --gtest_filter='device.properties/*' 2>&1
}

step_unit() {
    cd "$REPO"
    # One test at a time: NeuronCores belong to one process at a time.
    bazel test --local_test_jobs=1 --test_output=errors \
        --test_env=HAL_NEURON_LIBNRT="$LIBNRT" --test_env=NRT_CONTRACT_LIBRARY="$LIBNRT" \
        //hal_backends/trainium/tests:trn_backend_test //hal_backends/trainium/tests:trn_memory_test \
        //hal_backends/trainium/tests:trn_stream_test //hal_backends/trainium/tests:trn_comm_test \
        //hal_backends/trainium/tests:trn_program_test \
        //hal_backends/trainium/emulator/tests:tensor_test \
        //hal_backends/trainium/emulator/tests:init_test \
        //hal_backends/trainium/emulator/tests:cc_test
}

step_conformance() {
    cd "$REPO"
    local filter=() rc=0
    [ "$QUICK" = 1 ] && filter=(--gtest_filter='-comm.*_processes_*')
    export NEURON_RT_NUM_CORES="$CORES" HAL_BACKEND_PATH="$REPO/bazel-bin/hal_backends/trainium"
    echo "== conformance, native collectives (NEURON_RT_NUM_CORES=$CORES)"
    ./bazel-bin/conformance/hal_conformance --backend=trainium "${filter[@]}" \
        --gtest_output="json:$OUTDIR/conformance.json" || rc=1
    echo "== conformance, comm area, host-staged (HAL_NEURON_NATIVE_COLLECTIVES=0)"
    local host_filter='comm.*'
    [ "$QUICK" = 1 ] && host_filter='comm.*-comm.*_processes_*'
    HAL_NEURON_NATIVE_COLLECTIVES=0 ./bazel-bin/conformance/hal_conformance --backend=trainium \
        --gtest_filter="$host_filter" --gtest_output="json:$OUTDIR/conformance_host_comm.json" ||
        rc=1
    return $rc
}

step_bench() {
    cd "$REPO"
    local quick=()
    [ "$QUICK" = 1 ] && quick=(--quick)
    local peers=(--no-peers)
    [ -x "$REPO/bazel-bin/bench/coll_peer_mpi" ] && peers=()
    NEURON_RT_NUM_CORES="$CORES" \
        HAL_BACKEND_PATH="$REPO/bazel-bin/hal_backends/cpu:$REPO/bazel-bin/hal_backends/trainium" \
        ./bazel-bin/bench/hal_bench --backend=trainium --ranks=2 "${quick[@]}" "${peers[@]}"
}

step_demo() {
    cd "$REPO"
    if [ "$QUICK" = 1 ]; then
        DEMO_STEPS=10 DEMO_COMPILE=0 DEMO_OUT="$OUTDIR/demo" bash examples/demo.sh
    else
        DEMO_COMPILE=0 DEMO_OUT="$OUTDIR/demo" bash examples/demo.sh
    fi
}

# StableHLO through the real compiler: the NEFF cache is the run's own, so every module is
# compiled here. Without a compiler the step fails, saying so: it is what this run is for.
step_compile() {
    cd "$REPO"
    local cc="${NEURON_CC:-neuronx-cc}"
    if ! command -v "$cc" >/dev/null 2>&1; then
        echo "no Neuron compiler: $cc is not on PATH (install neuronx-cc from AWS's Neuron pip" \
            "repository, or set NEURON_CC)"
        return 1
    fi
    local rc=0
    export NEURON_COMPILE_CACHE_URL="$OUTDIR/neff-cache"
    "$cc" --version 2>&1 | head -1
    echo "== conformance, StableHLO bodies (compiled by $cc)"
    NEURON_RT_NUM_CORES=1 HAL_BACKEND_PATH="$REPO/bazel-bin/hal_backends/trainium" \
        ./bazel-bin/conformance/hal_conformance --backend=trainium \
        --gtest_filter='*stablehlo*' --gtest_output="json:$OUTDIR/conformance_stablehlo.json" ||
        rc=1
    echo "== torch.compile on neuron (compiled by $cc)"
    (cd /tmp && TORCH_HAL_BACKEND=trainium python3 -m pytest -q -p no:cacheprovider \
        "$REPO/bridge/tests/test_compile_stablehlo.py" -k 'not second_process') || rc=1
    return $rc
}

export REPO OUTDIR QUICK CORES LIBNRT
export -f runtime_version step_env step_build step_probe step_unit step_conformance step_bench \
    step_demo step_compile

# ---- the run ---------------------------------------------------------------------------------

log "torch-hal Trainium run: repo $REPO, results in $OUTDIR (dry-run=$DRY_RUN quick=$QUICK" \
    "cores=$CORES)"
run_step env 120
cp "$OUTDIR/env.log" "$OUTDIR/env.txt"
IFS=$'\t' read -r RT_VERSION RT_DETAIL RT_KIND < <(runtime_version | tail -1)
log "libnrt $LIBNRT: ${RT_VERSION:-?} (${RT_KIND:-not loadable})"

NO_RUNTIME=""
if [ ! -e "$LIBNRT" ]; then
    NO_RUNTIME="no Neuron runtime at $LIBNRT (install aws-neuronx-runtime-lib, or set HAL_NEURON_LIBNRT)"
elif [ "${RT_KIND:-}" = emulator ] && [ "$ALLOW_EMULATOR" = 0 ]; then
    NO_RUNTIME="$LIBNRT is the libnrt emulator (--allow-emulator runs on it anyway)"
elif [ "${RT_KIND:-}" != emulator ] && ! ls /dev/neuron* >/dev/null 2>&1; then
    NO_RUNTIME="no Neuron device (/dev/neuron*): is the aws-neuronx-dkms driver loaded?"
fi

if [ "$DRY_RUN" = 1 ]; then
    log "dry run: the plan"
    for s in "${STEPS[@]}"; do
        skipped "$s" && log "  $s: skipped (--skip)" || log "  $s"
    done
    [ -n "$NO_RUNTIME" ] && log "would stop: $NO_RUNTIME"
    cat "$OUTDIR/env.txt"
    exit 0
fi
if [ -n "$NO_RUNTIME" ]; then
    log "stopping: $NO_RUNTIME"
    RESULT[build]="not run: $NO_RUNTIME"
fi

if [ -z "$NO_RUNTIME" ]; then
    if [ "${RT_KIND:-}" = emulator ]; then
        # Its machine of its own, so that cores this host's other jobs hold do not get in the way.
        export NEURON_EMU_INSTANCE_ID="trainium-run-$$" NEURON_EMU_LOCK_DIR="$OUTDIR/emu-locks"
    fi
    run_step build 3600
    if [[ "${RESULT[build]}" == passed || "${RESULT[build]}" == skipped* ]]; then
        run_step probe 300
        run_step unit 2400
        run_step conformance 5400
        run_step bench 2400
        run_step demo 2400
        run_step compile 3600
    fi
fi

# ---- the report ------------------------------------------------------------------------------

REPORT="$OUTDIR/report.md"
# The harness's Markdown summary of a conformance run, from its log.
conformance_summary() {
    awk '/^## Conformance summary/ {on = 1} on {print} /^[0-9]+ passed, [0-9]+ failed/ && on {on = 0}' \
        "$1" 2>/dev/null
}
{
    if [ "${RT_KIND:-}" = emulator ]; then
        echo "**This run used the libnrt emulator, not a Neuron device: it says nothing about hardware.**"
        echo
    fi
    echo "## Trainium backend on the Neuron runtime: $(date -u +%Y-%m-%d)"
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| commit | \`$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)\`$(git -C "$REPO" status --porcelain 2>/dev/null | grep -q . && echo ' (with local changes)') |"
    echo "| instance | $(sed -n 's/^== instance type: //p' "$OUTDIR/env.txt") |"
    echo "| Neuron driver | $(sed -n 's/^== Neuron driver: //p' "$OUTDIR/env.txt") |"
    echo "| libnrt | \`$LIBNRT\` ${RT_VERSION:-?}: ${RT_DETAIL:-} |"
    echo "| packages | $(awk '/^== Neuron packages/ {on = 1; next} /^== / {on = 0} on {printf "%s; ", $0}' "$OUTDIR/env.txt" | sed 's/  */ /g') |"
    echo "| path line | $(grep -m1 '^trainium: libnrt' "$OUTDIR/probe.log" 2>/dev/null || echo '(no probe)') |"
    echo
    echo "| step | result | seconds |"
    echo "|---|---|---:|"
    for s in "${STEPS[@]}"; do echo "| $s | ${RESULT[$s]} | ${SECONDS_TAKEN[$s]} |"; done
    [ -n "$NO_RUNTIME" ] && echo && echo "Stopped: $NO_RUNTIME."
    if [ -f "$OUTDIR/unit.log" ]; then
        echo
        echo "### The backend's tests and the libnrt contract tests"
        echo '```'
        grep -E '^//.*(PASSED|FAILED|SKIPPED|NO STATUS|TIMEOUT)' "$OUTDIR/unit.log" || report_tail "$OUTDIR/unit.log" 15
        grep -hE '^\[  SKIPPED \]|skipped: ' "$OUTDIR/unit.log" | sort | uniq -c | head -20
        echo '```'
    fi
    if [ -f "$OUTDIR/conformance.log" ]; then
        echo
        echo "### Conformance, native collectives ($CORES cores)"
        conformance_summary <(awk '/^== conformance, comm area, host-staged/ {exit} {print}' "$OUTDIR/conformance.log")
        echo
        echo "### Conformance, comm area, host-staged (\`HAL_NEURON_NATIVE_COLLECTIVES=0\`)"
        conformance_summary <(awk '/^== conformance, comm area, host-staged/ {on = 1} on {print}' "$OUTDIR/conformance.log")
        echo
        echo "Failed tests, with what they said:"
        echo '```'
        python3 - "$OUTDIR/conformance.log" <<'PY'
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
current, said, shown = None, [], set()
for line in lines:
    m = re.match(r"\[ RUN +\] (\S+)", line)
    if m:
        current, said = m.group(1), []
        continue
    m = re.match(r"\[ +FAILED +\] (\S+?),? ", line + " ")
    if m and current == m.group(1) and current not in shown:
        shown.add(current)
        text = [l.strip() for l in said if l.strip() and l.strip() not in ("Failed", "Failure")]
        print(f"{current}: {' | '.join(text[:4])[:400]}")
        current = None
        continue
    if current:
        said.append(line)
if not shown:
    print("(none)")
PY
        echo '```'
    fi
    if [ -f "$OUTDIR/bench.log" ]; then
        echo
        echo "### Bench (hal_bench --backend=trainium)"
        echo '```'
        grep -E '^target:|^bench |reported native|^  machine:' "$OUTDIR/bench.log"
        echo '```'
        echo
        echo "Native collectives against host-staged (busbw GB/s):"
        echo '```'
        awk '/native collectives against host-staged/ {on = 1} /^  machine:/ {on = 0} on' \
            "$OUTDIR/bench.log"
        echo '```'
    fi
    if [ -f "$OUTDIR/demo.log" ]; then
        echo
        echo "### Demo (examples/demo.sh, DDP on 2 NeuronCores against the CPU)"
        echo '```'
        report_tail "$OUTDIR/demo.log" 12
        echo '```'
    fi
    echo
    echo "### Verified only on the emulator before this run"
    echo
    sed -n '/^<!-- emulator-only:begin -->/,/^<!-- emulator-only:end -->/p' \
        "$REPO/hal_backends/trainium/README.md" | sed '1d;$d'
} >"$REPORT"
log "report: $REPORT"

[ -n "$NO_RUNTIME" ] && exit 3
for s in "${STEPS[@]}"; do
    case "${RESULT[$s]}" in FAILED*) exit 1 ;; esac
done
exit 0
