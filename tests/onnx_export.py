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


def genai_export(hf_dir, out_dir, precision: str = "fp32", ep: str = "cpu", **extra) -> str:
    """onnxruntime-genai's model builder (GroupQueryAttention, SkipSimplifiedLayerNormalization, ...).
    extra: builder options, e.g. block_size=64, is_symmetric="false", accuracy_level=1 for int4.
    ep "dml" writes RotaryEmbedding nodes before GroupQueryAttention (do_rotary 0); the graph still runs on
    onnxruntime's CPU provider."""
    pytest.importorskip("onnxruntime_genai")
    add_tokenizer(hf_dir)
    opts = ["--extra_options", *(f"{k}={v}" for k, v in extra.items())] if extra else []
    r = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_dir), "-o", str(out_dir),
                        "-p", precision, "-e", ep, "-c", str(out_dir) + "_cache", *opts], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"the genai builder failed:\n{r.stderr[-3000:]}")
    return os.path.join(str(out_dir), "model.onnx")


def torch_export(hf_dir, path, opset: int = 23, dtype: str = "float32") -> str:
    """torch.onnx.export (the dynamo exporter) of an HF model with its KV cache, dynamic in sequence and past
    lengths; inputs input_ids, attention_mask, position_ids, past_key_values.N.key/value. dtype float16: the
    model's RMSNorm computes in fp32 between Casts, as HF writes it."""
    pytest.importorskip("onnxscript")
    import torch
    import transformers
    from transformers.cache_utils import DynamicCache

    hf = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=getattr(torch, dtype),
                                                           attn_implementation="sdpa").eval()
    layers = hf.config.num_hidden_layers

    class Step(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, position_ids, *kv):
            cache = DynamicCache()
            for i in range(layers):
                cache.update(kv[2 * i], kv[2 * i + 1], i)
            o = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                       past_key_values=cache, use_cache=True)
            return (o.logits, *[t for layer in o.past_key_values.layers for t in (layer.keys, layer.values)])

    with torch.no_grad():
        past = hf(torch.tensor([[1, 2, 3]]), use_cache=True).past_key_values
    kv = [t for layer in past.layers for t in (layer.keys, layer.values)]
    args = (torch.tensor([[5, 6]]), torch.ones(1, 5, dtype=torch.long), torch.tensor([[3, 4]]), *kv)
    names = ["input_ids", "attention_mask", "position_ids"] + [f"past_key_values.{i}.{k}" for i in range(layers)
                                                               for k in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    seq, total, past_len = torch.export.Dim("seq"), torch.export.Dim("total"), torch.export.Dim("past")
    dyn = ({1: seq}, {1: total}, {1: seq}, tuple([{2: past_len}] * (2 * layers)))
    with torch.no_grad():
        torch.onnx.export(Step(hf), args, str(path), dynamo=True, opset_version=opset, input_names=names,
                          output_names=outs, dynamic_shapes=dyn, verbose=False)
    return str(path)


OPTIMUM_VENV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv-optimum")


def optimum_python() -> str:
    """The interpreter of the venv holding optimum-onnx (it pins transformers < 4.58, older than the main
    environment's): KIEC_OPTIMUM_PYTHON, or .venv-optimum/ that scripts/optimum_venv.sh makes (.ci/run calls
    it). Missing: a skip on a developer machine, a failure in CI."""
    py = os.environ.get("KIEC_OPTIMUM_PYTHON") or os.path.join(OPTIMUM_VENV, "bin", "python")
    if not os.path.exists(py):
        msg = f"no optimum-onnx venv at {py}: run scripts/optimum_venv.sh"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return py


def optimum_export(family: str, directory, dtype: str = "fp32") -> tuple[str, str]:
    """A tiny `family` model made and exported (text-generation-with-past, fp32 or fp16) inside the optimum
    venv, by its transformers: returns (the HF directory, model.onnx)."""
    hf, out = os.path.join(str(directory), "hf"), os.path.join(str(directory), "onnx")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from tests.tiny_hf import make_tiny_hf\n"
        "make_tiny_hf(sys.argv[2], sys.argv[3])\n"
        "from optimum.exporters.onnx import main_export\n"
        "main_export(sys.argv[2], output=sys.argv[4], task='text-generation-with-past', device='cpu', "
        "dtype=sys.argv[5])\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([optimum_python(), "-c", script, root, hf, family, out, dtype], capture_output=True, text=True,
                       timeout=600)
    if r.returncode:
        raise RuntimeError(f"optimum export of {family} failed:\n{r.stderr[-3000:]}")
    return hf, os.path.join(out, "model.onnx")
