#!/usr/bin/env bash
# The venv the Optimum ONNX tests export with: optimum-onnx pins transformers < 4.58, older than kiec's own
# environment, so it lives apart (.venv-optimum/, git-ignored), on top of this interpreter's site-packages
# (torch, onnx) with its own transformers. tests/onnx_export.py finds it; .ci/run calls this script.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-optimum/bin/python ] || python3 -m venv --system-site-packages .venv-optimum
.venv-optimum/bin/python -m pip install -q "transformers>=4.51,<4.58" "optimum-onnx==0.1.0" "optimum==2.1.0"
.venv-optimum/bin/python -c "import optimum.exporters.onnx, transformers; print('optimum venv: transformers', transformers.__version__)"
