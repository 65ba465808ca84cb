#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the persistent kernel of a 2-layer tiny llama: one
# generation of 24 tokens through kiec-run, each tool in its own process. One log, $OUT/sanitize_MODE.log.
# Usage: scripts/sanitize.sh [MODE [field=value ...]]   (MODE persistent by default; graph works too; fields as
# scripts/tiny_model.py takes them)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
mode=${1:-persistent}; art=/tmp/kiec_sanitize/$mode
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null | head -1)
[ -n "$cs" ] || { echo "sanitize: compute-sanitizer not found"; exit 1; }
python3 scripts/tiny_model.py "$art" "$mode" "${@:2}" || exit 1
status=0; log="$OUT/sanitize_$mode.log"; : > "$log"  # one file: the device tool fetches only so many
for tool in memcheck racecheck synccheck; do
  echo "=== compute-sanitizer --tool $tool" >> "$log"
  timeout 150 "$cs" --tool "$tool" --error-exitcode 3 "$art/kiec-run" "$art" 1,2,3,4 24 > /tmp/sanitize.log 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  head -c 200000 /tmp/sanitize.log >> "$log"
  echo "sanitize $mode ${*:2} $tool: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitize.log | tail -1)"
done
exit $status
