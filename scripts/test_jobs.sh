#!/usr/bin/env bash
# scripts/test_jobs.sh IDS JOBS TIMEOUT OUTDIR [pytest options ...]: the pytest node ids listed in IDS (one a line)
# dealt round-robin over JOBS pytest processes run at once, each within TIMEOUT seconds, their outputs one after
# the other in OUTDIR/gpu_tests.log (one file: the device tool brings back a call's first files only); prints each
# process's last line and a total, and exits non-zero when any process failed, timed out, or there was no test to
# run (scripts/gpu_run.sh's tests; tests/cpu/test_test_jobs.py runs it). A process that did not end clean (pytest's -x
# may have left its later tests unrun) has all its ids written to OUTDIR/rerun_ids.txt: TEST_IDS for the next call.
set -uo pipefail
ids=$1 jobs=$2 limit=$3 out=$4; shift 4
n=$(grep -c "::" "$ids" || true)
[ "$n" -gt 0 ] || { echo "gpu tests: none selected"; exit 1; }
[ "$jobs" -gt "$n" ] && jobs=$n
logs=$(mktemp -d)
: > "$out/gpu_tests.log"
rm -f "$out/rerun_ids.txt"
pids=()
for ((j = 0; j < jobs; j++)); do
  mapfile -t mine < <(grep "::" "$ids" | awk -v n="$jobs" -v j="$j" '(NR - 1) % n == j')
  printf '%s\n' "${mine[@]}" > "$logs/$j.ids"
  timeout "$limit" python3 -m pytest "$@" "${mine[@]}" > "$logs/$j.log" 2>&1 &
  pids+=($!)
done
bad=0
for ((j = 0; j < jobs; j++)); do
  wait "${pids[$j]}"; rc=$?
  [ "$rc" -eq 0 ] || { bad=$((bad + 1)); cat "$logs/$j.ids" >> "$out/rerun_ids.txt"; }
  last=$(grep -E "passed|failed|error|no tests ran" "$logs/$j.log" | tail -1)
  echo "gpu tests, process $j (rc $rc): ${last:-no summary line (timed out or killed)}"
  [ "$rc" -eq 0 ] || grep -E "^(FAILED|ERROR)|Error|assert" "$logs/$j.log" | head -10
  { echo "=== process $j (rc $rc)"; cat "$logs/$j.log"; } >> "$out/gpu_tests.log"
done
rm -rf "$logs"
echo "gpu tests: $n in $jobs processes, $bad of them not clean"
[ "$bad" -eq 0 ]
