#!/usr/bin/env bash
# scripts/bench_stamp.sh SOURCE [nvcc flags ...]: a sha256 over what a device benchmark's build reads (bench/SOURCE.cu,
# kiec's headers, the generator of the ABI header) and its flags. scripts/bench_carry.sh writes it beside a build made
# on the CPU machine; scripts/bench_build.sh uses that build on the GPU machine only while the stamps agree.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$1; shift
{
  printf 'flags: %s\n' "$*"
  cat "bench/$src.cu" codegen/persistent_abi.py
  find templates/include/kiec -type f | LC_ALL=C sort | xargs cat
} | sha256sum | cut -d' ' -f1
