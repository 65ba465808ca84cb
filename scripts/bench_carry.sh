#!/usr/bin/env bash
# On the CPU machine: scripts/bench_carry.sh SOURCE OUT [nvcc flags ...] builds bench/SOURCE.cu as
# scripts/bench_build.sh would on the GPU machine, into .carry/bench/OUT with its stamp (scripts/bench_stamp.sh)
# beside it; carry .carry/bench, and gpu_run.sh uses the build while the sources and flags are the same (no nvcc there).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1 out=$2; shift 2
abi=$(mktemp -d); trap 'rm -rf "$abi"' EXIT
python3 -c "from kiec.codegen.persistent_abi import header; print(header())" > "$abi/persistent_abi.h"
mkdir -p .carry/bench && rm -f ".carry/bench/$out" ".carry/bench/$out.stamp"
ABI_DIR=$abi BENCH_OUT_DIR=.carry/bench bash scripts/bench_build.sh "$src" "$out" "$@"
bash scripts/bench_stamp.sh "$src" "$@" > ".carry/bench/$out.stamp"
