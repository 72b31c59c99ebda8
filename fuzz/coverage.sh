#!/usr/bin/env bash
# Line coverage of the code under test, reached by each C target's corpus (the committed seeds
# plus what `make fuzz` found, out/fuzz/found/TARGET): builds the targets again with clang's
# source-based coverage, replays the corpora once and prints llvm-cov's summary for the files
# each target is about.
#
#   fuzz/coverage.sh [--out DIR] [TARGET...]        (default: every C target)
set -eu
out=out/fuzz
[ "${1:-}" = --out ] && { out="$2"; shift 2; }
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(unique_id bootstrap_wire faults_spec layers_env cpu_env comm_bind comm_timeout)
cc="${FUZZ_CC:-clang}"
flags=(-std=c11 -D_GNU_SOURCE -I. -Ihal/include -g -O0 -fsanitize=fuzzer
       -fprofile-instr-generate -fcoverage-mapping -w)
libs=(-lpthread -ldl -lrt -lm)
core=(hal/src/*.c hal/layers/*.c)
comm=(hal/src/comm/*.c hal/services/*.c)
bootstrap=() # every bootstrap file but SHA-256/HMAC (bootstrap_internal.h lists them)
for f in hal/src/comm/bootstrap_*.c; do [ "$f" != hal/src/comm/bootstrap_hmac.c ] && bootstrap+=("$f"); done
mkdir -p "$out/coverage"
for t in "${targets[@]}"; do
    case "$t" in
    unique_id) src=(fuzz/fuzz_unique_id.c "${bootstrap[@]}" hal/src/comm/bootstrap_hmac.c hal/src/status.c); files=(hal/src/comm/bootstrap_id.c) ;;
    bootstrap_wire) src=(fuzz/fuzz_bootstrap_wire.c hal/src/comm/bootstrap_hmac.c hal/src/status.c); files=("${bootstrap[@]}") ;;
    comm_bind) src=(fuzz/fuzz_comm_bind.c hal/src/comm/bootstrap_hmac.c hal/src/status.c); files=(hal/src/comm/bootstrap_socket.c) ;;
    faults_spec) src=(fuzz/fuzz_faults_spec.c hal/layers/faults_spec.c); files=(hal/layers/faults_spec.c) ;;
    layers_env) src=(fuzz/fuzz_layers_env.c); for f in "${core[@]}"; do [ "$f" != hal/layers/trace_file.c ] && src+=("$f"); done; files=(hal/layers/layer.c hal/layers/trace_file.c) ;;
    cpu_env) src=(fuzz/fuzz_cpu_env.c hal_backends/cpu/cpu_env.c); files=(hal_backends/cpu/cpu_env.c) ;;
    comm_timeout) src=(fuzz/fuzz_comm_timeout.c); for f in "${core[@]}" "${comm[@]}"; do [ "$f" != hal/src/comm/comm.c ] && src+=("$f"); done; files=(hal/src/comm/comm.c) ;;
    *) echo "coverage: unknown target $t" >&2; continue ;;
    esac
    bin="$out/coverage/fuzz_$t"
    "$cc" "${flags[@]}" -o "$bin" "${src[@]}" "${libs[@]}"
    dirs=(fuzz/corpus/"$t")
    [ -d "$out/found/$t" ] && dirs+=("$out/found/$t")
    LLVM_PROFILE_FILE="$bin.profraw" "$bin" -runs=0 "${dirs[@]}" >/dev/null 2>&1 || true
    llvm-profdata merge -o "$bin.profdata" "$bin.profraw"
    echo "== $t"
    # The harness includes some files (#include "x.c"): report the functions by file either way.
    llvm-cov report "$bin" -instr-profile="$bin.profdata" "${files[@]}" "fuzz/fuzz_$t.c" 2>/dev/null |
        awk 'NR == 1 || /^-/ || /TOTAL/ || /\.c /' | cut -c1-160
done
