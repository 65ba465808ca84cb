"""ONNX exports of the tiny HF models, made by the producers installable here."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def add_tokenizer(directory) -> None:
    """A word-level tokenizer over the tiny vocabulary: the genai builder saves the model's tokenizer too."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(256)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2").save_pretrained(
        str(directory))


def genai_export(hf_dir, out_dir, precision: str = "fp32", **extra) -> str:
    """onnxruntime-genai's model builder (GroupQueryAttention, SkipSimplifiedLayerNormalization, ...).
    extra: builder options, e.g. block_size=64, is_symmetric="false", accuracy_level=1 for int4."""
    pytest.importorskip("onnxruntime_genai")
    add_tokenizer(hf_dir)
    opts = ["--extra_options", *(f"{k}={v}" for k, v in extra.items())] if extra else []
    r = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out_dir),
                        "-p", precision, "-e", "cpu", "-c", str(out_dir) + "_cache", *opts], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"the genai builder failed:\n{r.stderr[-3000:]}")
    return os.path.join(str(out_dir), "model.onnx")
