#!/usr/bin/env bash
# scripts/bench_build.sh SOURCE OUT [nvcc flags ...]: $BENCH_OUT_DIR/OUT (/tmp by default) from bench/SOURCE.cu, built
# against kiec's headers and the generated ABI header in $ABI_DIR (/tmp/abi). A build carried from the CPU machine
# ($CARRY_DIR/OUT, .carry/bench by default, made by scripts/bench_carry.sh) is used instead, without nvcc, only where
# its stamp ($CARRY_DIR/OUT.stamp) is this tree's (scripts/bench_stamp.sh over the same source, headers and flags):
# a build of older sources would otherwise be timed as the current one. (scripts/gpu_run.sh's device benchmarks.)
set -uo pipefail
cd "$(dirname "$0")/.."
src=$1 out=$2; shift 2
dest=${BENCH_OUT_DIR:-/tmp} carried=${CARRY_DIR:-.carry/bench}
if [ -x "$carried/$out" ]; then
  if [ "$(cat "$carried/$out.stamp" 2> /dev/null)" = "$(bash scripts/bench_stamp.sh "$src" "$@")" ]; then
    cp "$carried/$out" "$dest/$out" && echo "($out: carried, built on the CPU machine)" && exit 0
  fi
  echo "($out: the carried build is not of this tree's sources and flags: built here)"
fi
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I templates/include -I "${ABI_DIR:-/tmp/abi}" "$@" \
  "bench/$src.cu" -o "$dest/$out"
