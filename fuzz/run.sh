#!/usr/bin/env bash
# Runs fuzz targets (built by `make fuzz-build`, fuzz/BUILD) one after the other and prints, per target, the
# executions, the crashes and the coverage libFuzzer reached; exits 1 if any target crashed.
#
#   fuzz/run.sh [--out DIR] [--seconds S] [--runs N] TARGET...
#
# Each target runs until it made N executions (0: no limit) or S seconds passed, on its committed
# seed corpus (fuzz/corpus/TARGET, never modified) plus a working corpus DIR/found/TARGET that
# keeps what it found for the next run. Crash inputs go to DIR/artifacts/TARGET/, the output of
# each run to DIR/logs/TARGET.log. A target that cannot run says why and counts as skipped.
set -u
out=out/fuzz
seconds=60
runs=0
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
    esac
done
python="${FUZZ_PYTHON:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out/logs"
rows=()
crashed=0
for t in "${targets[@]}"; do
    work="$out/found/$t"
    artifacts="$out/artifacts/$t"
    log="$out/logs/$t.log"
    mkdir -p "$work" "$artifacts" "$here/corpus/$t"
    if [ -f "$here/fuzz_$t.py" ]; then
        cmd=("$python" "$here/fuzz_$t.py")
    else
        cmd=("$out/bin/fuzz_$t")
    fi
    flags=(-max_total_time="$seconds" -print_final_stats=1 -timeout=20 -rss_limit_mb=2560
           -artifact_prefix="$artifacts/" -close_fd_mask=2)
    [ "$runs" != 0 ] && flags+=(-runs="$runs")
    before=$(ls "$artifacts" | wc -l)
    start=$(date +%s)
    "${cmd[@]}" "${flags[@]}" "$work" "$here/corpus/$t" >"$log" 2>&1
    rc=$?
    elapsed=$(( $(date +%s) - start ))
    after=$(ls "$artifacts" | wc -l)
    new=$(( after - before ))
    if grep -q "^fuzz_$t: skipped" "$log"; then
        rows+=("$(printf '%-16s %14s %8s %10s %8s %7s  %s' "$t" - - - - - "$(grep -m1 skipped "$log")")")
        continue
    fi
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    if [ -z "$execs" ]; then # a crash ends the run before the final stats
        execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    fi
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
    ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
    corpus=$(ls "$work" | wc -l)
    status=ok
    if [ "$rc" != 0 ] || [ "$new" -gt 0 ]; then
        status=CRASH
        crashed=1
        [ "$new" -eq 0 ] && new=1
    fi
    rate=$(( ${execs:-0} / (elapsed > 0 ? elapsed : 1) ))
    rows+=("$(printf '%-16s %14s %8s %10s %8s %7s  %s' "$t" "${execs:-?}" "$new" \
        "${cov:-?}/${ft:-?}" "$rate" "${elapsed}s" "$status")")
    [ "$status" = CRASH ] && echo "fuzz: $t crashed; see $log and $artifacts/" >&2
done
printf '%-16s %14s %8s %10s %8s %7s  %s\n' target executions crashes "cov/ft" "exec/s" time result
for r in "${rows[@]}"; do echo "$r"; done
exit $crashed
