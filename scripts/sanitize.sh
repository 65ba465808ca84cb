#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the persistent kernel of a 2-layer tiny model: one
# generation of 24 tokens through kiec-run, each tool in its own process. One log, $OUT/sanitize_MODE.log.
# Usage: scripts/sanitize.sh [MODE [field=value ...]]   (MODE persistent by default; graph works too; fields as
# scripts/tiny_model.py takes them). Without fields, three tiny models in turn: the default one; `mma=1`, whose
# GEMVs run the tensor-core tile (persist_mma_rows) that the wide models' default kernels run and the default tiny
# model's widths keep off; and `qwen3=1`, whose attention norms q and k a head a warp (persist_attn_q_pairs_normed).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
mode=${1:-persistent}
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null | head -1)
[ -n "$cs" ] || { echo "sanitize: compute-sanitizer not found"; exit 1; }
if [ $# -gt 1 ]; then runs=("${*:2}"); else runs=("" "mma=1" "qwen3=1"); fi
status=0; log="$OUT/sanitize_$mode.log"; : > "$log"  # one file: the device tool fetches only so many
for i in "${!runs[@]}"; do
  fields=${runs[$i]}; art=/tmp/kiec_sanitize/$mode-$i
  # shellcheck disable=SC2086  # (fields: words on purpose)
  if ! python3 scripts/tiny_model.py "$art" "$mode" $fields; then
    status=1; echo "sanitize $mode $fields: the tiny model did not build"; continue
  fi
  for tool in memcheck racecheck synccheck; do
    echo "=== compute-sanitizer --tool $tool ($mode $fields)" >> "$log"
    timeout 150 "$cs" --tool "$tool" --error-exitcode 3 "$art/kiec-run" "$art" 1,2,3,4 24 > /tmp/sanitize.log 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    head -c 100000 /tmp/sanitize.log >> "$log"
    echo "sanitize $mode $fields $tool: rc $rc," \
      "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitize.log | tail -1)"
  done
done
exit $status
