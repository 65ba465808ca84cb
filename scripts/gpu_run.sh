#!/usr/bin/env bash
# One call on the GPU machine: install kiec, run the GPU tests, then `kiec bench` on the given models.
# Logs and JSON land in $OUT (or ./out). Usage: scripts/gpu_run.sh [tests|notests] [MODEL[:CONTEXT] ...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH="$PATH:/usr/local/cuda/bin"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv; git log -1 --oneline 2>/dev/null; } | tee "$OUT/env.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
mode=${1:-tests}; shift || true
if [ "$mode" = tests ]; then
  timeout 420 python3 -m pytest -q -x -m gpu tests/gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
for spec in "$@"; do
  model=${spec%%:*}; ctx=0; [ "$spec" != "$model" ] && ctx=${spec##*:}
  name=$(echo "$model" | tr -c 'A-Za-z0-9.\n-' '_')
  echo "=== kiec bench $model --context $ctx"
  timeout 400 kiec bench "$model" --context "$ctx" --json "$OUT/bench_${name}_ctx${ctx}.json" --work-dir /tmp/kiec_bench 2>&1 \
    | tee "$OUT/bench_${name}_ctx${ctx}.log" | grep -v "^\[kiec\] weights"
done
