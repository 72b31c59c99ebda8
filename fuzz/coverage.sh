#!/usr/bin/env bash
# Line coverage of the code under test, reached by each C target's corpus (the committed seeds
# plus what `make fuzz` found, out/fuzz/found/TARGET): builds the targets again with clang's
# source-based coverage (bazel build --config=fuzz-coverage, see .bazelrc), replays the corpora
# once and prints llvm-cov's summary for the files each target is about.
#
#   fuzz/coverage.sh [--out DIR] [TARGET...]        (default: every C target)
#
# Environment: BAZEL (default bazel).
set -eu
cd "$(dirname "$0")/.."
out=out/fuzz
[ "${1:-}" = --out ] && { out="$2"; shift 2; }
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(unique_id bootstrap_wire faults_spec layers_env cpu_env comm_bind comm_timeout)
bazel="${BAZEL:-bazel}"
labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:fuzz_$t"); done
"$bazel" build --config=fuzz-coverage "${labels[@]}"
bin="$("$bazel" info --config=fuzz-coverage bazel-bin)/fuzz"
mkdir -p "$out/coverage"
for t in "${targets[@]}"; do
    case "$t" in
    unique_id | bootstrap_wire | comm_bind) # the bootstrap's files, but for the HMAC (not a target)
        files=()
        for f in hal/src/comm/bootstrap*.c; do [ "$f" = hal/src/comm/bootstrap_hmac.c ] || files+=("$f"); done ;;
    faults_spec) files=(hal/layers/faults_spec.c) ;;
    layers_env) files=(hal/layers/layer.c hal/layers/trace_file.c) ;;
    cpu_env) files=(hal_backends/cpu/cpu_env.c) ;;
    comm_timeout) files=(hal/src/comm/comm.c) ;;
    *) echo "coverage: unknown target $t" >&2; continue ;;
    esac
    prof="$out/coverage/fuzz_$t"
    dirs=(fuzz/corpus/"$t")
    [ -d "$out/found/$t" ] && dirs+=("$out/found/$t")
    LLVM_PROFILE_FILE="$prof.profraw" "$bin/fuzz_$t" -runs=0 "${dirs[@]}" >/dev/null 2>&1 || true
    llvm-profdata merge -o "$prof.profdata" "$prof.profraw"
    echo "== $t"
    # Bazel records the compilation directory as /proc/self/cwd (reproducible outputs), so the
    # coverage mapping names files /proc/self/cwd/PATH, which from the repository root is the
    # checkout. The harness includes some files (#include "x.c"): reported by file either way.
    names=()
    for f in "${files[@]}" "fuzz/fuzz_$t.c"; do names+=("/proc/self/cwd/$f"); done
    llvm-cov report "$bin/fuzz_$t" -instr-profile="$prof.profdata" "${names[@]}" 2>/dev/null |
        awk 'NR == 1 || /^-/ || /TOTAL/ || /\.c /' | cut -c1-160
done
